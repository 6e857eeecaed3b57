"""Progress lines with rate and ETA for long loops (training, generation)."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("anchormask.progress")


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """Logs ``label step/total (pct) rate/s ETA h:mm:ss`` every ``log_every`` steps and at the end."""

    def __init__(self, label: str, total: int, *, log_every: int = 50, unit: str = "step",
                 start_at: int = 0) -> None:
        self.label, self.total, self.log_every, self.unit = label, total, max(1, log_every), unit
        self.start_at = start_at  # a resumed loop's rate counts only the steps done since it resumed
        self.start = time.perf_counter()

    def update(self, done: int, **fields: object) -> None:
        if done % self.log_every and done != self.total:
            return
        elapsed = time.perf_counter() - self.start
        rate = (done - self.start_at) / elapsed if elapsed > 0 else float("inf")
        eta = (self.total - done) / rate if rate > 0 else 0.0
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        log.info("%s %d/%d (%3.0f%%) %.1f %s/s ETA %s %s", self.label, done, self.total,
                 100 * done / max(1, self.total), rate, self.unit, _clock(eta), extra)
