"""Where the trainer's metrics go: `on_log` hooks, a CSV writer and a TensorBoard writer.

A hook is any callable `hook(step, metrics)`; `Trainer(on_log=[...])` calls each on the
main process every `log_every` optimizer steps, after the metrics were read (the one host
sync of the interval), with the means over the interval and over all processes, the
learning rate of the first parameter group (`lr`) and the time per step (`ms_per_step`).

    trainer = Trainer(on_log=[CSVWriter("metrics.csv"), TensorBoardWriter("runs/exp1")])
"""

from __future__ import annotations

import csv
import os
from typing import Callable

LogHook = Callable[[int, dict[str, float]], None]


class CSVWriter:
    """Rows of `step,name,value` (one per metric and step), appended and flushed at every call.

    The long format keeps one header whatever metrics appear later; `pandas.read_csv(path)
    .pivot(index="step", columns="name", values="value")` gives one column per metric.  The
    file is opened at the first call, so a writer made on every rank writes on rank 0 only."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._file = None
        self._writer = None

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        if self._file is None:
            directory = os.path.dirname(self.path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            new = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
            self._file = open(self.path, "a", newline="")
            self._writer = csv.writer(self._file)
            if new:
                self._writer.writerow(["step", "name", "value"])
        for name, value in metrics.items():
            self._writer.writerow([step, name, repr(float(value))])
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class TensorBoardWriter:
    """Scalars for TensorBoard (`torch.utils.tensorboard`, which needs the `tensorboard` package);
    the event file is made at the first call (on rank 0 only)."""

    def __init__(self, log_dir: str | os.PathLike) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # tensorboard is not a dependency of perflint
            raise ImportError("TensorBoardWriter needs the tensorboard package: pip install tensorboard") from exc
        self._make = lambda: SummaryWriter(log_dir=os.fspath(log_dir))
        self._writer = None

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        if self._writer is None:
            self._writer = self._make()
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
