"""Where a training step's time goes: time stamps taken during a step, split after it.

While a step runs, the harness's probes only append `(time, kind)` pairs to a list (a
clock read and an append, well under a microsecond); the arithmetic happens in
`split_step`, after the step's clock has been read, so it is never timed.  The kinds:

    "data"       entering `DataLoader` iteration (`_BaseDataLoaderIter.__next__`)
    "h2d"        entering a `Tensor.to` / `Tensor.cuda` call that copied a CPU tensor to
                 another device (stamped after the call, with the time it started)
    "backward"   entering `torch.autograd.backward` (which `Tensor.backward` calls)
    "optimizer"  entering `optimizer.step()` (the global pre-step hook)
    None         leaving the innermost of the above

Every instant of a step is charged to exactly one phase, so the phases add up to the
step time:

    data       inside the loader's `__next__`: waiting for the next batch (anything the
               loader runs, collate, transforms, pinning, counts here)
    h2d        inside host-to-device copies made outside the loader
    compute    forward + backward: inside `backward()`, and the host time just before
               it, back to the previous stamp (the batch fetch or copy, the previous
               backward or optimizer step, or the step's start) — the forward pass and
               the loss
    optimizer  inside `optimizer.step()` of any optimizer
    other      all other host time: logging, metrics, `.item()`, `zero_grad`, schedulers…
    device     CUDA only: waiting, at the end of the step, for GPU work the host had
               queued (the harness synchronises before reading the clock)

On the CPU every operation runs synchronously, so these are the times the work took.
On CUDA they are host times: a kernel launched in one phase can run while the host is
in the next, and a synchronising call (`.item()`, a blocking copy) waits for all queued
work inside the phase it is called from; `device` is what is left at the step's end.
`SyncCounter` counts those synchronising calls.
"""

from __future__ import annotations

import re
import threading
import warnings
from typing import Callable, Iterable

PHASES = ("data", "h2d", "compute", "optimizer", "other", "device")
PHASE_OF_KIND = {"data": "data", "h2d": "h2d", "backward": "compute", "optimizer": "optimizer"}

Event = tuple  # (time in seconds, kind or None)


def split_step(events: Iterable[Event], start: float, host_end: float, end: float | None = None) -> dict[str, float]:
    """The step from `start` to `end`, split into `PHASES` (seconds; they sum to end − start).

    `host_end` is when the host finished the step (before the end-of-step device
    synchronisation), `end` when the clock was read (`host_end` when nothing was waited
    for).  Unmatched exits are ignored; phases still open at `host_end` end there.
    """
    end = host_end if end is None else end
    out = dict.fromkeys(PHASES, 0.0)
    stack: list[str] = []
    last = start
    for t, kind in events:
        t = min(max(t, last), host_end)  # stamps are monotonic; clamp against a late append
        if stack:
            out[stack[-1]] += t - last
        else:  # host time outside every probe: the forward pass when it leads to a backward
            out["compute" if kind == "backward" else "other"] += t - last
        last = t
        if kind is None:
            if stack:
                stack.pop()
        elif stack and stack[-1] == "data":
            stack.append("data")  # what the loader does (a transform's copy, say) is data loading
        else:
            stack.append(PHASE_OF_KIND[kind])
    out[stack[-1] if stack else "other"] += host_end - last
    out["device"] = max(end - host_end, 0.0)
    return out


# ----------------------------------------------------------------------------------------
# Host syncs on CUDA
# ----------------------------------------------------------------------------------------

# What torch warns (`c10::cuda::warn_or_error_on_sync`) under `set_sync_debug_mode("warn")`.
SYNC_MESSAGE = "called a synchronizing CUDA operation"
_SYNC_PATTERN = re.escape(SYNC_MESSAGE)


class SyncCounter:
    """Counts the main thread's host syncs with the GPU while `active`.

    Two sources: torch's sync debug mode set to "warn", whose warnings are counted and
    swallowed (shown only when the script asked for them itself), and explicit
    `torch.cuda.synchronize()` calls, which that mode does not report (`note_explicit`).
    The script's own `set_sync_debug_mode` calls go through `script_sets_mode`, so that
    a script that asks for errors still gets them.

    `set_mode(int)` is torch's setter (injected, so that this class runs without CUDA).
    """

    def __init__(self, set_mode: Callable[[int], None]) -> None:
        self._set_mode = set_mode
        self.count = 0
        self.active = False
        self.script_mode = 0
        self._main = threading.get_ident()
        self._previous_show = None
        self._hook = self._show  # one bound method, so that `is` recognises it

    # -- the switch ----------------------------------------------------------------
    def start(self) -> None:
        """Begin counting (called between steps, when CUDA is known to be in use)."""
        self.active = True
        self.ensure_installed()
        self._set_mode(2 if self.script_mode == 2 else 1)

    def ensure_installed(self) -> None:
        """Keep the warning filter first and the display hook ours (a script may have
        changed either, e.g. `simplefilter("ignore")` or `logging.captureWarnings`)."""
        if not self.active:
            return
        first = warnings.filters[0] if warnings.filters else None
        if not (first and first[0] == "always" and first[1] is not None and first[1].pattern == _SYNC_PATTERN):
            warnings.filterwarnings("always", message=_SYNC_PATTERN, category=UserWarning)
        if warnings.showwarning is not self._hook:
            self._previous_show = warnings.showwarning
            warnings.showwarning = self._hook

    # -- what the script does ------------------------------------------------------
    def note_explicit(self) -> None:
        if self.active and threading.get_ident() == self._main:
            self.count += 1

    def script_sets_mode(self, mode: int) -> None:
        self.script_mode = mode
        if self.active:
            self._set_mode(2 if mode == 2 else 1)
        else:
            self._set_mode(mode)

    def _show(self, message, category, filename, lineno, file=None, line=None):
        if self.active and str(message).startswith(SYNC_MESSAGE):
            if threading.get_ident() == self._main:
                self.count += 1
            if self.script_mode != 1:
                return None  # not asked for by the script: counted, not shown
        previous = self._previous_show or warnings._showwarning_orig  # type: ignore[attr-defined]
        return previous(message, category, filename, lineno, file, line)

    def take(self) -> int:
        """The count since the last `take`."""
        n, self.count = self.count, 0
        return n


def mode_number(mode: int | str) -> int:
    """`set_sync_debug_mode`'s argument as its number (as torch maps it)."""
    if isinstance(mode, str):
        return {"default": 0, "warn": 1, "error": 2}.get(mode, 0)
    return int(mode)
