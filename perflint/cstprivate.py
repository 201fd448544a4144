"""The one place that reaches into libcst's private API.

Two uses.  `CodegenState`, libcst's code generator state, which the position tables
(`perflint.positions`) and the minimal-edit writer (`perflint.fixedits`) drive directly to
learn where each node's text starts and ends.  And two speed-ups, below.

Nothing here happens on import.  Importing perflint leaves libcst exactly as it is, so a
tool, a test or the (threaded) language server that shares the process gets stock libcst.
Two speed-ups are applied only where perflint owns the process, that is `perflint check`
/ `fix` / `verify` and the worker processes they fork (`perflint.ownership`; the first
parse there calls `claim_process()`):

* **Node classes** (`_fast_node_classes`).  Nodes hash by identity through a Python-level
  `__hash__` that each class carries (every analysis keys dicts by node): each class takes
  `object`'s, in C.  The classes are ABCs, so every `isinstance(node, cst.Call)` that is
  false runs `ABCMeta.__instancecheck__`: they take a metaclass without that hook (libcst
  registers no virtual subclasses, so every answer is the same).  Timed stage by stage in
  one process over timm's 279 summarised files: the facts walk 1.05 → 0.85 CPU s, the rules
  1.30 → 1.12 s, the summaries 1.06 → 0.92 s.
* **Parsing without re-validation** (`parse_module`).  Each node checks its fields in
  `CSTNode.__post_init__` (2.4 million calls for 315 timm files); a tree the parser builds
  is valid by construction.  Skipping the check while the parser runs saves 15–20 % of the
  parse.  The hook is a class attribute, so switching it off is process-wide: it is done
  only in a claimed process, under a lock with a count of parses in flight, and the real
  hook (captured once, here) is put back when the last parse ends, whatever the threads
  do.  Nodes that fixes build are still validated.

Tested against the libcst versions `pyproject.toml` allows (`tests/test_cstspeed.py`):
every answer is the same with and without the speed-ups, and validation is on again after
concurrent parses.  Where a libcst lacks what is patched, the speed-up is skipped.
"""

from __future__ import annotations

import threading
from abc import ABCMeta

import libcst as cst

from libcst._nodes.internal import CodegenState  # noqa: F401 - re-exported for positions/fixedits

try:  # the class whose __post_init__ validates every node (private in every libcst so far)
    from libcst._nodes.base import CSTNode as _CSTNode
except ImportError:  # pragma: no cover - a libcst that moved it: no parse speed-up
    _CSTNode = None

_REAL_POST_INIT = _CSTNode.__dict__.get("__post_init__") if _CSTNode is not None else None

_lock = threading.Lock()
_in_flight = 0
_claimed = False


class _NodeMeta(ABCMeta):
    """libcst's node classes without `ABCMeta`'s Python-level `isinstance`/`issubclass` hooks."""

    __instancecheck__ = type.__instancecheck__
    __subclasscheck__ = type.__subclasscheck__


def _no_validation(self) -> None:
    return None


def claimed() -> bool:
    """Whether this process is perflint's own (the speed-ups are on)."""
    return _claimed


def claim_process() -> None:
    """Turn the speed-ups on for this process: call only where perflint owns the process
    (the command line, its workers), never from a library entry point."""
    global _claimed
    with _lock:
        if _claimed:
            return
        _fast_node_classes()
        _claimed = True


def _fast_node_classes() -> None:
    python_level = cst.CSTNode.__dict__.get("__hash__")
    todo, seen = [cst.CSTNode], set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
        if python_level is not None and cls.__dict__.get("__hash__") is python_level:
            cls.__hash__ = object.__hash__  # type: ignore[method-assign]
        if type(cls) is ABCMeta:
            try:
                cls.__class__ = _NodeMeta
            except TypeError:  # an interpreter that refuses: the classes stay as they are
                pass


def parse_module(text: str) -> cst.Module:
    """`libcst.parse_module`; in a claimed process, without re-validating the parser's nodes."""
    global _in_flight
    if not _claimed:
        from perflint import ownership

        if not ownership.OWNED:
            return cst.parse_module(text)
        claim_process()
    if _REAL_POST_INIT is None:
        return cst.parse_module(text)
    with _lock:
        _in_flight += 1
        _CSTNode.__post_init__ = _no_validation  # type: ignore[method-assign,union-attr]
    try:
        return cst.parse_module(text)
    finally:
        with _lock:
            _in_flight -= 1
            if _in_flight == 0:
                _CSTNode.__post_init__ = _REAL_POST_INIT  # type: ignore[method-assign,union-attr]


def validation_on() -> bool:
    """Whether libcst validates new nodes now (the real hook is in place)."""
    return _CSTNode is None or _CSTNode.__dict__.get("__post_init__") is _REAL_POST_INIT
