"""What every output records about the software and the machine that made it.

The CPU model is recorded because float32 kernels differ by instruction set in their last bits:
the same seeds and inputs give byte-identical outputs only on one CPU model (README
"Reproducibility across machines"). The GPU's name is recorded where a job runs on one.
"""

from __future__ import annotations

import platform
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

PACKAGES = ("torch", "transformers", "peft", "numpy", "pandas", "pyarrow", "scipy", "bm25s", "anchormask")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what ``platform`` knows."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def gpu_name() -> str | None:
    """The name of the CUDA device this process uses (the current one: modeljob.start sets it where a job
    takes one of several) when this process uses torch and torch sees a GPU.

    A job that never imported torch (tables, statistics) runs on no GPU, and importing torch
    only to ask would cost it seconds of start-up.
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(torch.cuda.current_device())


@cache
def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    found["cpu"] = cpu_model()
    if (gpu := gpu_name()) is not None:
        found["gpu"] = gpu
    return found
