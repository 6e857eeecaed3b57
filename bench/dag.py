"""6. DAG build: ``snakemake -n`` on the full default DAG, in the repository (a dry run only).

Three runs, each a fresh ``snakemake`` process (interpreter start, Snakefile parse, config
validation, data checks, DAG): the median is the value; the job count of the DAG comes from
the dry run's job-stats table.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path

from bench import common
from bench.common import Line, say

TARGET_S = 5.0


def snakemake_exe() -> str:
    return str(Path(common.python()).with_name("snakemake"))


def job_total(output: str) -> int | None:
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Job stats:"):
            for row in lines[i + 3:]:
                parts = row.split()
                if len(parts) == 2 and parts[0] == "total":
                    return int(parts[1])
    return None


def run(threads: int | None = None, repeats: int = 3) -> tuple[dict, list[Line]]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    walls, jobs = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        proc = subprocess.run([snakemake_exe(), "-n"], cwd=common.REPO, capture_output=True, text=True, env=env,
                              timeout=300)
        walls.append(time.perf_counter() - t)
        if proc.returncode != 0:
            raise RuntimeError(f"snakemake -n failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        jobs = job_total(proc.stdout + proc.stderr)
    value = statistics.median(walls)
    say(f"dag: snakemake -n {', '.join(f'{w:.2f}' for w in walls)} s; {jobs} jobs to run")
    payload = {"benchmark": "dag", "command": "snakemake -n", "cwd": str(common.REPO), "wall_s_runs": [round(w, 3) for w in walls],
               "wall_s": round(value, 3), "jobs": jobs, "target_s": TARGET_S}
    return payload, [Line("dag.dry_run", value, "s", TARGET_S, higher=False, note=f"{jobs} jobs")]
