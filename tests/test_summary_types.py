"""Module summaries have the shape `analysis.summary_types` declares: every required key is
there, no key is undeclared, and nested records (classes, methods, signatures, calls) too.
Checked on the summaries of every project fixture and every realistic fixture."""

from __future__ import annotations

import typing

import pytest

from fixture_support import FIXTURES
from perflint.analysis.summary import SUMMARY_VERSION
from perflint.analysis.summary_types import ClassInfo, FunctionInfo, ModuleSummary
from perflint.server.project import summarise_bytes

FILES = sorted((FIXTURES / "projects").rglob("*.py")) + sorted((FIXTURES / "realistic").glob("*.py"))


def _problems(value, td, where: str) -> list[str]:
    """What in `value` does not match the TypedDict `td` (nested TypedDicts checked too)."""
    if not isinstance(value, dict):
        return [f"{where}: not a dict"]
    hints = typing.get_type_hints(td)
    out = [f"{where}: missing {k!r}" for k in sorted(td.__required_keys__ - value.keys())]
    out += [f"{where}: undeclared {k!r}" for k in sorted(value.keys() - hints.keys())]
    for key, sub in value.items():
        hint = hints.get(key)
        for nested in _typed_dicts(hint):
            out += _check(sub, hint, nested, f"{where}.{key}")
    return out


def _typed_dicts(hint) -> list:
    return [a for a in _walk(hint) if typing.is_typeddict(a)]


def _walk(hint):
    yield hint
    for a in typing.get_args(hint):
        yield from _walk(a)


def _check(value, hint, nested, where: str) -> list[str]:
    origin = typing.get_origin(hint)
    if typing.is_typeddict(hint):
        return _problems(value, hint, where)
    if origin in (dict, typing.Dict) and isinstance(value, dict):
        return [p for k, v in value.items() for p in _check(v, typing.get_args(hint)[1], nested, f"{where}[{k!r}]")]
    if origin in (list, typing.List) and isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _check(v, typing.get_args(hint)[0], nested, f"{where}[{i}]")]
    return []


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_a_summary_has_the_declared_shape(path):
    summary = summarise_bytes(str(path), path.read_bytes())
    assert summary is not None and summary["v"] == SUMMARY_VERSION
    assert _problems(summary, ModuleSummary, path.name) == []


def test_the_checker_finds_what_does_not_match():
    good = summarise_bytes("m.py", b"import torch\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
                                   b"        return x\n\n\ndef f(a, *, b=1):\n    return Net()\n\n\nf(1, b=2)\n")
    assert _problems(good, ModuleSummary, "m") == []
    bad = {**good, "extra": 1}
    del bad["calls"]
    bad["classes"] = {"Net": {**good["classes"]["Net"], "methods": {"forward": {"sig": {"pos": []}}}}}
    got = _problems(bad, ModuleSummary, "m")
    assert "m: missing 'calls'" in got and "m: undeclared 'extra'" in got
    assert "m.classes['Net'].methods['forward']: missing 'returns'" in got
    assert set(FunctionInfo.__required_keys__) <= set(good["functions"]["f"])
    assert set(ClassInfo.__required_keys__) <= set(good["classes"]["Net"])
