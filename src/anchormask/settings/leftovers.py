"""Outputs under results/ that the current configuration does not produce: those an earlier configuration
left (a single-base run's tables beside a `bases:` run's), which nothing else marks and a reader would
take for the current study's.

The current configuration's outputs are its DAG's: the workflow's own at the end of a run (``onsuccess``
in the Snakefile), or `snakemake --summary` for `anchormask audit check`. Logs and benchmarks (they follow
their jobs), `results/bench/` (`python -m bench`), `results/published/` and `results/README.md` (shipped
with the repository) are not study outputs and are never listed.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from anchormask.fileio import InputError
from anchormask.settings.audit import VOLATILE_DIRS

# Logs and benchmarks (audit's volatile folders) at any depth: a base's own are under results/bases/<name>/.
NOT_STUDY_OUTPUTS = ("bench", "published", "README.md")  # at the top of results/


def _relative(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.normpath(path))


def leftovers(produced: Iterable[str], results: str | os.PathLike[str] = "results",
              workdir: str | os.PathLike[str] = ".") -> list[str]:
    """Paths under ``results`` (relative to ``workdir``) that no path in ``produced`` is or holds: each
    folder that holds nothing produced once (with a trailing /), else the file."""
    work, base = Path(workdir), _relative(results)
    produced_paths = {_relative(p) for p in produced}
    live = {parent for p in produced_paths for parent in p.parents} | produced_paths
    found = set()
    for dirpath, dirnames, filenames in os.walk(work / base):
        here = Path(dirpath).relative_to(work)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and here / d not in produced_paths
                             and d not in VOLATILE_DIRS and not (here == base and d in NOT_STUDY_OUTPUTS))
        for name in filenames:
            rel = here / name
            if name.startswith(".") or rel in produced_paths or (here == base and name in NOT_STUDY_OUTPUTS):
                continue
            found.add(_unit(rel, base, live))
    return sorted(found)


def _unit(rel: Path, base: Path, live: set[Path]) -> str:
    """The highest folder above ``rel``, below ``base``, that holds nothing produced; else ``rel`` itself."""
    unit, is_dir = rel, False
    for parent in rel.parents:
        if parent == base or parent in live:
            break
        unit, is_dir = parent, True
    return unit.as_posix() + ("/" if is_dir else "")


def produced_by_jobs(jobs: Iterable) -> list[str]:
    """Every output, log and benchmark of Snakemake jobs (a DAG's ``jobs``)."""
    paths = []
    for job in jobs:
        paths += [str(f) for f in job.output] + [str(f) for f in job.log]
        paths += [str(job.benchmark)] if job.benchmark else []
    return paths


def produced_by_summary(snakemake: str, args: Sequence[str], workdir: str | os.PathLike[str] = ".") -> list[str]:
    """The outputs and logs of the DAG that ``snakemake --summary ARGS`` (the run's config options) lists."""
    proc = subprocess.run([snakemake, "--summary", *args], cwd=workdir, capture_output=True, text=True)
    lines = proc.stdout.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("output_file\t")), None)
    if proc.returncode != 0 or header is None:
        raise InputError(f"snakemake --summary {' '.join(args)} (in {Path(workdir).resolve()}) failed, so the "
                         "current configuration's outputs are unknown; give the --configfile / --config options "
                         f"of your run after `--`:\n{proc.stderr.strip()[-2000:]}")
    columns = lines[header].split("\t")
    paths = []
    for line in lines[header + 1:]:
        row = dict(zip(columns, line.split("\t")))
        paths.append(row["output_file"])
        paths += [p.strip() for p in row.get("log-file(s)", "-").split(",") if p.strip() not in ("", "-")]
    return paths


def format_leftovers(found: Sequence[str], results: str = "results") -> str:
    if not found:
        return f"Every output under {results}/ is one the current configuration produces.\n"
    lines = [f"{len(found)} output(s) under {results}/ that the current configuration does not produce (an earlier "
             "configuration's; not part of this study's results, safe to move away):"]
    return "\n".join(lines + [f"  {path}" for path in found]) + "\n"


def after_run(jobs: Iterable, targets: Iterable[str], results: str = "results") -> str:
    """What the end of a run says: the leftovers beside the DAG of ``jobs``, when the run built the default
    target (a run of named targets builds part of the study, so the rest would look left over)."""
    if list(targets):
        return ""
    found = leftovers(produced_by_jobs(jobs), results)
    return format_leftovers(found, results) if found else ""
