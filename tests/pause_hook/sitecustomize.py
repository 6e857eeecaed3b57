"""Test-only hook (tests/test_audit.py, scenario 6): stop a training job inside its training loop.

Python imports ``sitecustomize`` at start-up from the first sys.path entry that has one, so a
process whose PYTHONPATH starts with this folder runs this file; nothing in src/ or workflow/
knows about it, and the code digests of the rules do not change. With ANCHORMASK_PAUSE_DIR set,
a training job whose progress line reports a step before its last (``train <job id> s/n``,
logged every train.log_every steps) writes ``<job id>`` into that folder and then sleeps until
it is killed. The test waits for the file and kills the run: the job is, for certain, past its
model loading and before its last step, and so before anything is saved.
"""

import logging
import os
import re
import time

PAUSE_DIR = os.environ.get("ANCHORMASK_PAUSE_DIR")
PROGRESS = re.compile(r"^train (\S+) (\d+)/(\d+) ")


def _pause_inside_training(record: logging.LogRecord) -> bool:
    match = PROGRESS.match(record.getMessage())
    if match and int(match.group(2)) < int(match.group(3)):
        path = os.path.join(PAUSE_DIR, match.group(1))
        with open(path + ".tmp", "w") as fh:
            fh.write(f"{os.getpid()}\n")
        os.replace(path + ".tmp", path)
        while True:
            time.sleep(60)
    return True


if PAUSE_DIR:
    logging.getLogger("anchormask.progress").addFilter(_pause_inside_training)
