"""python -m bench [--only NAME] [--e2e] [--threads N] [--shape NAME] [--record]: run the benchmarks, print one line
per target, write results/bench/<name>.json (and, with --record, the tracked bench/results/<name>.json).

``--only gpu`` checks the CUDA path (bench/gpu.py); without CUDA it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
import traceback
import warnings

from bench import common
from bench.common import Line, say

# name -> module; each module's run(threads=...) returns (payload, lines)
BENCHMARKS = {
    "training": "bench.training",
    "sampler": "bench.sampling",
    "bootstrap": "bench.stats",
    "memory": "bench.memory",
    "dag": "bench.dag",
    "e2e": "bench.e2e",
    "gpu": "bench.gpu",
    "scale": "bench.scale",
    "checkpointing": "bench.checkpointing",
}
DEFAULT = ["training", "memory", "sampler", "bootstrap", "dag"]  # memory trains the adapter sampler uses


class StepsFailed(RuntimeError):
    """A benchmark ran to its end, wrote its numbers, and reports steps that failed."""


def run_one(name: str, threads: int | None, record_tracked: bool = False) -> list[Line]:
    module = importlib.import_module(BENCHMARKS[name])
    say(f"== {name}")
    start = time.perf_counter()
    facts_before = common.machine_facts(threads)
    base_before = common.base_identity(common.load_config())
    payload, lines = module.run(threads=threads)
    base_after = common.base_identity(common.load_config())
    record = {
        **payload,
        "lines": [line.record() for line in lines],
        "bench_wall_s": round(time.perf_counter() - start, 2),
        "machine": facts_before | {"load_average_after": list(os.getloadavg())},
        "base": base_before,
    }
    if base_after["sha256"] != base_before["sha256"]:
        record["base_replaced_during_benchmark"] = base_after
        say(f"   WARNING: data/base changed during this benchmark ({base_before['sha256'][:12]} -> "
            f"{base_after['sha256'][:12]}); rerun it for numbers on one checkpoint")
    paths = common.write_result(name, record, record=record_tracked)
    say(f"   wrote {', '.join(str(p.relative_to(common.REPO)) for p in paths)} ({record['bench_wall_s']:.1f} s)")
    for line in lines:
        say(line.format())
    if record.get("failed_steps"):
        raise StepsFailed(f"{name}: failed steps {', '.join(record['failed_steps'])} (tracebacks above)")
    return lines


def without_gpu(names: list[str]) -> list[str]:
    """``gpu`` is dropped, with one line saying why, where torch sees no CUDA device."""
    if "gpu" not in names:
        return names
    import torch

    from bench import gpu

    if (reason := gpu.no_cuda_reason(torch)) is None:
        return names
    say(reason)
    return [n for n in names if n != "gpu"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", choices=sorted(BENCHMARKS), action="append",
                        help="run only this benchmark (repeatable)")
    parser.add_argument("--e2e", action="store_true", help="also run the end-to-end benchmark (~6 min)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of the in-process competitors (default: the pipeline's per-job "
                             "train.threads / generation.threads)")
    parser.add_argument("--shape", action="append", default=None,
                        help="scale benchmark: only this shape (repeatable; bench/scale.py SHAPES)")
    parser.add_argument("--record", action="store_true",
                        help="also update the tracked record bench/results/<name>.json that the docs cite")
    args = parser.parse_args(argv)
    if args.shape:
        from bench import scale

        unknown = sorted(set(args.shape) - set(scale.SHAPES))
        if unknown:
            parser.error(f"--shape: unknown {', '.join(unknown)}; known: {', '.join(scale.SHAPES)}")
        scale.SELECTED = args.shape
    names = without_gpu(args.only or DEFAULT + (["e2e"] if args.e2e else []))
    if not names:
        return 0
    logging.basicConfig(level=logging.WARNING)
    for handler in logging.getLogger().handlers:  # libraries that set DEBUG on their own logger (bm25s)
        handler.setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=FutureWarning)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:  # the weight-loading progress bars of transformers
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass
    start = time.perf_counter()
    threads = args.threads if args.threads is not None else "as config.yaml's jobs"
    say(f"bench: {', '.join(names)}; torch threads {threads}; {common.cpu_model()}, "
        f"{os.cpu_count()} logical cores, load average {os.getloadavg()[0]:.2f}")
    summary: list[Line] = []
    failed = []
    for name in names:
        try:
            summary += run_one(name, args.threads, record_tracked=args.record)
        except StepsFailed as err:
            say(str(err))
            failed.append(name)
        except Exception:  # one broken benchmark must not hide the others' numbers
            traceback.print_exc()
            failed.append(name)
    say(f"== summary ({time.perf_counter() - start:.0f} s)")
    for line in summary:
        say(line.format())
    for name in failed:
        say(f"{name:<26} {'FAILED':>20}   (traceback above)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
