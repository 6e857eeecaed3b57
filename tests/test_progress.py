import logging

import pytest

from anchormask import progress

pytestmark = pytest.mark.unit


def test_a_resumed_loop_reports_the_rate_and_eta_of_the_steps_since_it_resumed(monkeypatch, caplog):
    clock = iter([100.0, 110.0])  # constructed at t=100 s, updated 10 s later
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    bar = progress.Progress("pretrain", 8000, log_every=50, start_at=3500)
    with caplog.at_level(logging.INFO, logger="anchormask.progress"):
        bar.update(3550)
    line = caplog.records[-1].getMessage()
    assert "5.0 step/s" in line  # 50 steps in 10 s, not 3550
    assert "ETA 0:14:50" in line  # 4450 steps left at 5 step/s


def test_updates_between_log_points_are_silent(caplog):
    bar = progress.Progress("train", 100, log_every=50)
    with caplog.at_level(logging.INFO, logger="anchormask.progress"):
        bar.update(10)
    assert not caplog.records
