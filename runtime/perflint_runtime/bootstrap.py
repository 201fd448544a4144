"""Run an unmodified training script and time its optimizer steps.

    python -m perflint_runtime.bootstrap --steps 30 --warmup 5 --result out.json -- train.py --lr 1e-3

The script runs in this process as `__main__` (as `python train.py …` would run it).
Before it starts, global optimizer step hooks are registered, so every `optimizer.step()`
of every optimizer is seen without touching the script:

* a step ends in the post-step hook: the device is synchronised, then the clock is read;
  a step's time runs from the end of the previous step to the end of this one, so it
  holds data loading, forward, backward and the update;
* the step is split into phases (waiting for data, host-to-device copies, forward +
  backward, optimizer step, other host time, and on CUDA the end-of-step wait for the
  GPU; see `perflint_runtime.phases`): probes in the loader's `__next__`, in
  `Tensor.to`/`Tensor.cuda`, in `backward()` and around `optimizer.step()` only append
  a time stamp; the split is computed after the clock is read.  On CUDA the measured
  steps also count host syncs (`torch.cuda.set_sync_debug_mode("warn")`, its warnings
  counted and swallowed, plus explicit `torch.cuda.synchronize()` calls);
* the first `warmup` steps are discarded; the clock restarts after the harness's own
  bookkeeping, which is therefore never timed;
* the loss is the scalar last passed to `backward()` (through `torch.autograd.backward`,
  which `Tensor.backward` calls), or the unscaled value given to `GradScaler.scale`; it is
  read after the clock, when the device is already idle;
* the batch size is the first dimension of the first tensor in the first DataLoader
  batch, else of the first tensor given to a module's forward;
* after `warmup + steps` steps the JSON result is written and the process exits at once
  with status 0, whatever the script would have done next.

When the script has several optimizers (a GAN, say), the first one to step defines the
step.  A script that returns, calls `sys.exit`, or raises before enough steps still gets a
result file that says so, with the steps it did reach.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import runpy
import sys
import threading
import time
import weakref
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from perflint_runtime.phases import PHASES, SyncCounter, mode_number, split_step
from perflint_runtime.sysinfo import cpu_model

STATUS_COMPLETE = "complete"  # reached warmup + steps
STATUS_RETURNED = "returned"  # the script ended normally before that
STATUS_EXITED = "exited"  # the script called sys.exit before that
STATUS_CRASHED = "crashed"  # the script raised


@dataclass
class Result:
    """What one measured run reports (the JSON file's content)."""

    status: str = STATUS_CRASHED
    exit_code: int = 0
    warmup: int = 0
    steps_wanted: int = 0
    steps_done: int = 0
    step_times_s: list[float] = field(default_factory=list)
    losses: list[float | None] = field(default_factory=list)
    batch_size: int | None = None
    peak_memory_bytes: int | None = None
    memory_kind: str = "rss"
    device: str = "cpu"
    device_name: str = ""
    torch_version: str = torch.__version__
    torch_threads: int = 1
    # per measured step, seconds in each phase (`perflint_runtime.phases.PHASES`)
    phase_times_s: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})
    # per measured step, host syncs with the GPU; None when the run did not use CUDA
    host_syncs: list[int] | None = None
    # The warm-up asked for, and the one used: longer when the loaders' prefetch queue
    # (workers × prefetch_factor batches, filled while the first steps run) had not been
    # drained by then, so that no measured step is served from batches made in advance.
    warmup_requested: int = 0
    prefetch_depth: int = 0  # the largest workers × prefetch_factor of the loaders iterated
    batches_seen: int = 0  # batches taken from multi-process loaders during the warm-up


_cuda_synchronize = torch.cuda.synchronize  # the harness's own, never counted as the script's


def synchronize() -> None:
    """Wait for queued device work, so that the clock reads finished work."""
    if torch.cuda.is_initialized():
        _cuda_synchronize()


def first_tensor(value: object) -> torch.Tensor | None:
    """The first tensor in a (nested) tuple, list or dict, or the value itself."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


def leading_dim(value: object) -> int | None:
    tensor = first_tensor(value)
    if tensor is None or tensor.dim() == 0:
        return None
    return int(tensor.shape[0])


class StepRecorder:
    """Counts and times optimizer steps; calls `on_complete` after warmup + steps."""

    def __init__(self, warmup: int, steps: int, on_complete) -> None:
        if warmup < 1:
            raise ValueError("warmup must be at least 1: the first step's time includes start-up")
        self.result = Result(warmup=warmup, steps_wanted=steps, warmup_requested=warmup)
        self.prefetched = 0  # batches the current loaders may hold in advance
        self.batches = 0  # batches taken from multi-process loaders so far
        self.max_extra_warmup = 1000  # never wait longer than this for a queue to drain
        self._seen_iterators: weakref.WeakSet = weakref.WeakSet()
        self.on_complete = on_complete
        self.primary: int | None = None  # id() of the optimizer whose steps are counted
        self.pending_losses: list[torch.Tensor] = []
        self.scaled_loss: torch.Tensor | None = None
        self.loader_batch: int | None = None
        self.forward_batch: int | None = None
        self.in_loader = False
        self.started = 0.0
        self.events: list[tuple[float, str | None]] = []  # this step's probe stamps (`phases`)
        self.main_thread = threading.get_ident()
        self.syncs: SyncCounter | None = None  # set by `install` where CUDA can be used

    # -- hooks -----------------------------------------------------------------------
    def pre_step(self, optimizer, args, kwargs) -> None:
        self.mark("optimizer")
        if self.primary is None:
            self.primary = id(optimizer)

    def post_step(self, optimizer, args, kwargs) -> None:
        if id(optimizer) != self.primary:
            self.mark(None)
            return
        if torch.cuda.is_initialized():
            host_end = time.perf_counter()
            before = self.syncs.count if self.syncs is not None else 0
            synchronize()
            now = time.perf_counter()
            if self.syncs is not None:
                self.syncs.count = before  # the harness's own wait is not the script's sync
        else:
            now = host_end = time.perf_counter()
        # -- bookkeeping: not timed ----------------------------------------------------
        r = self.result
        r.steps_done += 1
        events = self.events[:]
        self.events.clear()
        syncs = self.syncs.take() if self.syncs is not None else 0
        if r.steps_done > r.warmup:
            r.step_times_s.append(now - self.started)
            if r.phase_times_s:
                for phase, seconds in split_step(events, self.started, host_end, now).items():
                    r.phase_times_s[phase].append(seconds)
            if self.syncs is not None and self.syncs.active:
                if r.host_syncs is None:
                    r.host_syncs = []
                r.host_syncs.append(syncs)
        r.losses.append(self._take_loss())
        if r.steps_done == r.warmup and self.prefetched and self.batches <= self.prefetched \
                and r.warmup < r.warmup_requested + self.max_extra_warmup:
            r.warmup += 1  # the prefetch queue is not drained yet: one more warm-up step
        if r.steps_done == r.warmup:
            r.batches_seen = self.batches
            self._reset_peak_memory()
            if self.syncs is not None and torch.cuda.is_initialized():
                self.syncs.start()
        elif self.syncs is not None:
            self.syncs.ensure_installed()
        if r.steps_done == r.warmup + r.steps_wanted:
            r.status = STATUS_COMPLETE
            self.on_complete(self)
        self.events.clear()
        if self.syncs is not None:
            self.syncs.take()  # the bookkeeping's own syncs (reading the loss) are not the script's
        self.started = time.perf_counter()

    def mark(self, kind: str | None) -> None:
        """A probe: stamp the time (main thread only; see `perflint_runtime.phases`)."""
        if threading.get_ident() == self.main_thread:
            self.events.append((time.perf_counter(), kind))

    def note_backward(self, tensors) -> None:
        if isinstance(tensors, (list, tuple)):
            if len(tensors) != 1:
                return
            tensors = tensors[0]
        if not isinstance(tensors, torch.Tensor) or tensors.numel() != 1:
            return
        if tensors is self.scaled_loss:  # already noted, unscaled, by GradScaler.scale
            self.scaled_loss = None
            return
        self.pending_losses.append(tensors.detach())

    def note_scaled(self, outputs, scaled) -> None:
        if isinstance(outputs, torch.Tensor) and outputs.numel() == 1 and scaled is not outputs:
            self.pending_losses.append(outputs.detach())
            self.scaled_loss = scaled

    def note_loader_iterator(self, iterator) -> None:
        """A multi-process loader iterator starts: it fills a queue of workers × prefetch_factor
        batches at once."""
        workers = getattr(iterator, "_num_workers", 0) or 0
        if workers and self.result.steps_done < self.result.warmup:
            depth = workers * (getattr(iterator, "_prefetch_factor", 2) or 2)
            self.prefetched = max(self.prefetched, self.batches + depth)
            self.result.prefetch_depth = max(self.result.prefetch_depth, depth)

    def note_loader_next(self, iterator) -> None:
        if getattr(iterator, "_num_workers", 0):
            if iterator not in self._seen_iterators:
                self._seen_iterators.add(iterator)
                self.note_loader_iterator(iterator)
            self.batches += 1

    def note_loader_batch(self, batch) -> None:
        if self.loader_batch is None:
            self.loader_batch = leading_dim(batch)

    def note_forward(self, args) -> bool:
        """Record a forward call's batch size; True once one is known."""
        if self.in_loader:
            return False
        self.forward_batch = leading_dim(args)
        return self.forward_batch is not None

    # -- result ----------------------------------------------------------------------
    def finish(self, status: str, exit_code: int) -> Result:
        r = self.result
        if r.status != STATUS_COMPLETE:
            r.status = status
        r.exit_code = exit_code
        r.batch_size = self.loader_batch if self.loader_batch is not None else self.forward_batch
        r.torch_threads = torch.get_num_threads()
        if torch.cuda.is_initialized():
            r.device = "cuda"
            r.device_name = torch.cuda.get_device_name()
            r.memory_kind = "cuda"
            r.peak_memory_bytes = int(torch.cuda.max_memory_allocated())
        else:
            r.device = "cpu"
            r.device_name = cpu_model()
            r.memory_kind = "rss"
            r.peak_memory_bytes = peak_rss_bytes()
        return r

    def _take_loss(self) -> float | None:
        losses, self.pending_losses = self.pending_losses, []
        if not losses:
            return None
        return float(torch.stack([t.float().reshape(()) for t in losses]).mean())

    @staticmethod
    def _reset_peak_memory() -> None:
        if torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()


def peak_rss_bytes() -> int:
    """The process's peak resident set size (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def install(recorder: StepRecorder, split: bool = True) -> None:
    """Register the optimizer hooks and the loss and batch-size probes; with `split`, the
    phase probes too (without it nothing is stamped: the harness's cost can be measured)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    register_optimizer_step_pre_hook(recorder.pre_step)
    register_optimizer_step_post_hook(recorder.post_step)

    autograd_backward = torch.autograd.backward
    if not split:
        recorder.mark = lambda kind: None  # type: ignore[method-assign]
        recorder.result.phase_times_s = {}
    mark = recorder.mark

    @functools.wraps(autograd_backward)
    def backward(tensors, *args, **kwargs):
        recorder.note_backward(tensors)
        mark("backward")
        try:
            return autograd_backward(tensors, *args, **kwargs)
        finally:
            mark(None)

    torch.autograd.backward = backward

    scale = torch.amp.GradScaler.scale

    def scale_and_note(self, outputs):
        scaled = scale(self, outputs)
        recorder.note_scaled(outputs, scaled)
        return scaled

    torch.amp.GradScaler.scale = scale_and_note

    loader_next = _BaseDataLoaderIter.__next__

    def next_and_note(self):
        recorder.note_loader_next(self)
        mark("data")
        recorder.in_loader = True
        try:
            batch = loader_next(self)
        finally:
            recorder.in_loader = False
            mark(None)
        if recorder.loader_batch is None:
            recorder.note_loader_batch(batch)
        if not split:
            _BaseDataLoaderIter.__next__ = loader_next  # one batch is enough
            recorder.prefetched = 0  # batches are no longer counted: no prefetch-based warm-up
        return batch

    functools.update_wrapper(next_and_note, loader_next)
    _BaseDataLoaderIter.__next__ = next_and_note
    if split:
        install_copy_probes(recorder)
        if torch.cuda.is_available():
            install_sync_counter(recorder)

    handle = None
    compiling = getattr(torch.compiler, "is_compiling", lambda: False)

    def forward_pre_hook(module, args):
        if compiling():  # inside code torch.compile traces: do nothing (no graph break, no error under fullgraph)
            return
        if recorder.note_forward(args) and handle is not None:
            handle.remove()

    handle = torch.nn.modules.module.register_module_forward_pre_hook(forward_pre_hook)


def install_copy_probes(recorder: StepRecorder) -> None:
    """Stamp `Tensor.to` and `Tensor.cuda` calls that copy a CPU tensor to another device.

    The call is timed only when the tensor is on the CPU, and stamped only when what it
    returns is not (a dtype change or a no-op `.to("cpu")` leaves no stamp).  Inside
    code that torch.compile traces nothing is stamped."""
    stamp = recorder.events.append  # one list for the whole run, emptied after each step
    main = recorder.main_thread
    clock = time.perf_counter
    get_ident = threading.get_ident
    compiling = getattr(torch.compiler, "is_compiling", lambda: False)

    def probe(original):
        @functools.wraps(original)
        def copy(self, *args, **kwargs):
            if not self.is_cpu or compiling() or get_ident() != main:
                return original(self, *args, **kwargs)
            started = clock()
            out = original(self, *args, **kwargs)
            if out is not self and isinstance(out, torch.Tensor) and not out.is_cpu:
                stamp((started, "h2d"))
                stamp((clock(), None))
            return out

        return copy

    torch.Tensor.to = probe(torch.Tensor.to)
    torch.Tensor.cuda = probe(torch.Tensor.cuda)


def install_sync_counter(recorder: StepRecorder) -> None:
    """Count host syncs on CUDA (from the end of the warm-up; see `phases.SyncCounter`)."""
    counter = SyncCounter(lambda mode: torch._C._cuda_set_sync_debug_mode(mode))
    recorder.syncs = counter
    script_set_mode = torch.cuda.set_sync_debug_mode

    @functools.wraps(script_set_mode)
    def set_sync_debug_mode(debug_mode):
        script_set_mode(debug_mode)  # validates, initialises CUDA, as torch's own would
        counter.script_sets_mode(mode_number(debug_mode))

    @functools.wraps(_cuda_synchronize)
    def cuda_synchronize(device=None):
        counter.note_explicit()
        return _cuda_synchronize(device)

    torch.cuda.set_sync_debug_mode = set_sync_debug_mode
    torch.cuda.synchronize = cuda_synchronize


def write_result(path: str, result: Result) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(asdict(result), f)
    os.replace(tmp, path)


def exit_code_of(exc: SystemExit) -> int:
    """The status `sys.exit(code)` gives the shell."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    return 1  # sys.exit("message") prints the message and exits 1


def run(script: str, script_args: list[str], steps: int, warmup: int, result_path: str, split: bool = True) -> int:
    """Run `script` under the recorder; return the exit status for this process."""

    def complete(recorder: StepRecorder) -> None:
        write_result(result_path, recorder.finish(STATUS_COMPLETE, 0))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # stop the script here; DataLoader workers are reaped by the launcher

    recorder = StepRecorder(warmup, steps, complete)
    install(recorder, split)
    sys.argv = [script, *script_args]
    sys.path[0] = str(Path(script).resolve().parent)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exit_code_of(exc)
        if code and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        write_result(result_path, recorder.finish(STATUS_EXITED, code))
        return code
    except BaseException:  # noqa: BLE001 - report any failure of the script, then fail
        traceback.print_exc()
        write_result(result_path, recorder.finish(STATUS_CRASHED, 1))
        return 1
    write_result(result_path, recorder.finish(STATUS_RETURNED, 0))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perflint_runtime.bootstrap", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, required=True, help="measured optimizer steps")
    parser.add_argument("--warmup", type=int, required=True, help="optimizer steps discarded first (at least 1)")
    parser.add_argument("--result", required=True, help="where to write the JSON result")
    parser.add_argument("--no-split", action="store_true",
                        help="no phase probes (to measure what they cost): step times and losses only")
    parser.add_argument("script", help="the training script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    opts = parser.parse_args(argv)
    return run(opts.script, opts.script_args, opts.steps, opts.warmup, opts.result, split=not opts.no_split)


if __name__ == "__main__":
    sys.exit(main())
