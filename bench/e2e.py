"""4. End to end (``--e2e``, off by default: ~6 min on 2 idle cores): ``snakemake --cores 2`` in a temporary copy of
the repository from a clean results/, against the 12-minute target, with a per-rule breakdown
summed from results/benchmarks/**/*.tsv (the ``s`` column; ``max_rss`` is the rule's largest);
a file's rule is the one whose ``benchmark:`` pattern in workflow/rules/*.smk matches it.

The copy holds what git sees (tracked and untracked-but-not-ignored files, so the current
data/base whatever it is), never results/ outputs.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench import common
from bench.common import Line, say

TARGET_S = 720.0  # the main job on 2 idle cores of either CPU model, the embedded base of ~5M parameters


def benchmark_patterns(rules_dir: Path) -> list[tuple[str, re.Pattern, int]]:
    """(rule, regex of its benchmark path, literal length) from the ``benchmark:`` of each rule in *.smk."""
    patterns = []
    for smk in sorted(rules_dir.glob("*.smk")):
        rule, expecting = None, False
        for line in smk.read_text().splitlines():
            if m := re.match(r"^\s*(?:rule|checkpoint)\s+(\w+)\s*:", line):  # a rule inside an `if` is indented
                rule, expecting = m.group(1), False
            elif line.strip() == "benchmark:":
                expecting = True
            elif expecting and rule and (m := re.match(r'\s*f?"([^"]+)"', line)):
                parts = re.split(r"\{[^}]+\}", m.group(1))
                regex = re.compile("[^/]+".join(re.escape(p) for p in parts) + "$")
                patterns.append((rule, regex, sum(map(len, parts))))
                expecting = False
    return patterns


def rule_of(tsv: Path, results: Path, patterns) -> str:
    """The rule whose benchmark pattern matches (the most specific one); else the file's folder."""
    rel = "results/" + tsv.relative_to(results).as_posix()
    matches = [(length, rule) for rule, regex, length in patterns if regex.match(rel)]
    if matches:
        return max(matches)[1]
    inner = tsv.relative_to(results / "benchmarks")
    return inner.parts[0] if len(inner.parts) > 1 else inner.stem


def breakdown(results: Path, rules_dir: Path | None = None) -> dict[str, dict[str, float]]:
    root = results / "benchmarks"
    patterns = benchmark_patterns(rules_dir or common.REPO / "workflow" / "rules")
    rules: dict[str, dict[str, float]] = defaultdict(lambda: {"jobs": 0, "s": 0.0, "max_rss_mib": 0.0})
    for tsv in sorted(root.rglob("*.tsv")):
        with open(tsv) as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                r = rules[rule_of(tsv, results, patterns)]
                r["jobs"] += 1
                r["s"] += float(row["s"])
                try:
                    r["max_rss_mib"] = max(r["max_rss_mib"], float(row.get("max_rss") or 0))
                except ValueError:  # "NA"
                    pass
    return {k: {"jobs": int(v["jobs"]), "s": round(v["s"], 2), "max_rss_mib": v["max_rss_mib"]}
            for k, v in sorted(rules.items(), key=lambda kv: -kv[1]["s"])}


def run(threads: int | None = None, cores: int = 2, extra_args: tuple[str, ...] = ()) -> tuple[dict, list[Line]]:
    """``extra_args`` go to snakemake (e.g. ("--configfile", "tests/configs/tiny.yaml") to try this quickly)."""
    work = Path(tempfile.mkdtemp(prefix="anchormask-bench-e2e-"))
    try:
        repo = common.copy_repo(work / "repo")
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        command = [common.snakemake_exe(), "--cores", str(cores), *extra_args]
        say(f"e2e: snakemake --cores {cores} {' '.join(extra_args)} in {repo}".replace("  ", " "))
        t = time.perf_counter()
        proc = subprocess.run(command, cwd=repo, capture_output=True, text=True, env=env, timeout=3600)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise RuntimeError(f"snakemake --cores {cores} failed ({proc.returncode}) after {wall:.0f} s:\n"
                               f"{proc.stderr[-4000:]}")
        rules = breakdown(repo / "results", repo / "workflow" / "rules")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summed = sum(r["s"] for r in rules.values())
    cpu = common.cpu_model()  # the time depends on the CPU model (docs/time-and-benchmarks.md)
    say(f"e2e: {wall:.1f} s wall; rule time summed {summed:.1f} s (on {cores} cores, {cpu})")
    for name, r in rules.items():
        say(f"e2e:   {name:<22} {r['jobs']:4d} jobs {r['s']:9.1f} s  max RSS {r['max_rss_mib']:.0f} MiB")
    payload = {"benchmark": "e2e", "command": " ".join(["snakemake", "--cores", str(cores), *extra_args]),
               "wall_s": round(wall, 2), "cpu": cpu,
               "target_s": TARGET_S, "rule_seconds_summed": round(summed, 2), "rules": rules}
    return payload, [Line("e2e.wall", wall, "s", TARGET_S, higher=False,
                          note=f"rules sum to {summed:.0f} s on {cores} cores of {cpu}")]
