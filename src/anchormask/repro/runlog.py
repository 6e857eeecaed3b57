"""Logging for jobs: every line goes to the rule's log: file and to stderr.

An uncaught exception is logged with its traceback too, so a failed job's log under
results/logs/ says why it failed (Snakemake keeps only the script's stderr otherwise).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path


def _log_uncaught(kind, value, tb) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, tb)
        return
    logging.getLogger("anchormask").critical("job failed", exc_info=(kind, value, tb))


def log_to(path: str | None, level: int = logging.INFO) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(path, mode="w"))
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        handlers=handlers, force=True)
    sys.excepthook = _log_uncaught
