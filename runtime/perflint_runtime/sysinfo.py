"""Where a measurement was taken: CPU model, Python, platform, load (no torch import)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's marketing name, e.g. "AMD EPYC 7R13 Processor"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host() -> dict:
    """This machine; the load average (1, 5, 15 min) says whether other work shared the CPUs."""
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
    }
