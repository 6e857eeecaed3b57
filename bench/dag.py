"""6. DAG build: ``snakemake -n`` on the full default DAG (a dry run only).

It runs in a temporary copy of the repository without results/, so the dry run plans every job
of the default target, as on a fresh clone (in a finished tree it would plan nothing). Three
runs, each a fresh ``snakemake`` process (interpreter start, Snakefile parse, config
validation, data checks, DAG): the median is the value; the job count comes from the dry run's
job-stats table.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench import common
from bench.common import Line, say

TARGET_S = 5.0


def run(threads: int | None = None, repeats: int = 3) -> tuple[dict, list[Line]]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    work = Path(tempfile.mkdtemp(prefix="anchormask-bench-dag-"))
    common.register_cleanup(work)
    repo = common.copy_repo(work / "repo")
    walls, jobs = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        proc = subprocess.run([common.snakemake_exe(), "-n"], cwd=repo, capture_output=True, text=True, env=env,
                              timeout=300)
        walls.append(time.perf_counter() - t)
        if proc.returncode != 0:
            raise RuntimeError(f"snakemake -n failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                               f"{proc.stderr[-3000:]}")
        jobs = sum(common.job_counts(proc.stdout + proc.stderr).values())
    value = statistics.median(walls)
    say(f"dag: snakemake -n {', '.join(f'{w:.2f}' for w in walls)} s; {jobs} jobs to run")
    payload = {"benchmark": "dag", "command": "snakemake -n", "cwd": "a copy of the repository without results/",
               "wall_s_runs": [round(w, 3) for w in walls], "wall_s": round(value, 3), "jobs": jobs,
               "target_s": TARGET_S}
    return payload, [Line("dag.dry_run", value, "s", TARGET_S, higher=False, note=f"{jobs} jobs")]
