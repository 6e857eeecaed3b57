"""What every output records about the software that made it."""

from __future__ import annotations

import platform
from functools import cache
from importlib import metadata

PACKAGES = ("torch", "transformers", "peft", "numpy", "pandas", "pyarrow", "scipy", "bm25s", "anchormask")


@cache
def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found
