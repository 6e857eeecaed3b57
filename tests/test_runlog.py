"""A job's log file holds the traceback of the exception that ended it."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_uncaught_exception_lands_in_the_job_log(tmp_path):
    log = tmp_path / "logs" / "job.log"
    script = ("from anchormask.repro import runlog\n"
              f"runlog.log_to({str(log)!r})\n"
              "raise KeyError('no such id in config.json')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 1
    text = log.read_text()
    assert "job failed" in text and "Traceback" in text and "no such id in config.json" in text
