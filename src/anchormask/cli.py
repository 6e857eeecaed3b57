"""The `anchormask` command: checkpoint hashes and audit manifests of a results tree.

Why: pinning config.yaml's base.sha256 and checking that a rerun touched only what it
should are both questions about bytes; these subcommands answer them without Snakemake.

    anchormask hash DIR                                manifest hash of a checkpoint directory
    anchormask audit manifest [--results R] [-o FILE]  JSON manifest of every output under R
    anchormask audit compare OLD NEW                   changed / unchanged / added / removed
    anchormask audit check [--results R] [-- ARGS]     missing or altered intermediates (exit 1 if any); outputs
                                                       the configuration (config.yaml + ARGS) does not produce
    anchormask audit why [--results R]                 per rule, the modules whose code changed since it ran
    anchormask evaluate-base [--base DIR] [-o DIR]     quality gates of a base (base_eval.py)
    anchormask run [SNAKEMAKE ARGS ...]                check --config / --configfile, then run snakemake
    anchormask lm-eval [LM_EVAL ARGS ...]              lm-evaluation-harness with the `anchormask` model and
                                                       the project's tasks (anchormask.harness)
    anchormask lm-eval-tasks [--config FILE]           rebuild the project's lm-eval task data from data/
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from anchormask import base_eval, fileio, schemas, study
from anchormask.checksum import directory_sha256
from anchormask.embedded_base import pretrain_text
from anchormask.harness import model, tasks  # noqa: F401  (model registers `anchormask` with lm-eval)
from anchormask.model import modeljob
from anchormask.reporting.markdown import base_evaluation_markdown
from anchormask.repro import runlog
from anchormask.settings import audit, command_line, config, leftovers


def _hash(args: argparse.Namespace) -> int:
    print(directory_sha256(args.directory))
    return 0


def _results_in_workdir(args: argparse.Namespace) -> tuple[str, str]:
    """(results relative to the working directory, the working directory). An absolute --results is
    accepted as the working directory's results folder, since Snakemake's records name paths relative
    to the directory it ran in."""
    results, workdir = Path(args.results), Path(args.workdir).resolve()
    if not results.is_absolute():
        return str(results), str(workdir)
    results = results.resolve()
    if args.workdir == "." and not results.is_relative_to(workdir):
        workdir = results.parent
    if not results.is_relative_to(workdir):
        raise SystemExit(f"anchormask audit: --results {args.results} is not inside --workdir {args.workdir}; "
                         f"give --workdir the directory Snakemake ran in and --results relative to it")
    return str(results.relative_to(workdir)), str(workdir)


def _manifest(args: argparse.Namespace) -> int:
    text = audit.write_manifest(audit.build_manifest(*_results_in_workdir(args)), args.output)
    if args.output is None:
        sys.stdout.write(text)
    return 0


def _compare(args: argparse.Namespace) -> int:
    result = audit.compare_manifests(audit.read_manifest(args.old), audit.read_manifest(args.new))
    sys.stdout.write(audit.format_comparison(result))
    return 0


def _check(args: argparse.Namespace) -> int:
    results, workdir = _results_in_workdir(args)
    found = audit.check_intermediates(results, workdir)
    sys.stdout.write(audit.format_check(found))
    _report_leftovers(results, workdir, [a for a in args.snakemake_args if a != "--"])
    return 1 if found else 0


def _report_leftovers(results: str, workdir: str, snakemake_args: list[str]) -> None:
    """The outputs the current configuration (config.yaml and ``snakemake_args``) does not produce."""
    if not (Path(workdir) / "Snakefile").is_file():
        sys.stdout.write(f"(no Snakefile in {workdir}: outputs of earlier configurations are not looked for)\n")
        return
    try:
        produced = leftovers.produced_by_summary(snakemake_program(), snakemake_args, workdir)
    except fileio.InputError as err:
        sys.stdout.write(f"outputs of earlier configurations not looked for: {err}\n")
        return
    sys.stdout.write(leftovers.format_leftovers(leftovers.leftovers(produced, results, workdir), results))


def _why(args: argparse.Namespace) -> int:
    results, workdir = _results_in_workdir(args)
    sys.stdout.write(audit.format_code_changes(audit.code_changes(workdir, results)))
    return 0


def _evaluate_base(args: argparse.Namespace) -> int:
    runlog.log_to(None)
    cfg = config.load(args.config)
    base = modeljob.Base.from_config({**cfg["base"], **({"path": args.base, "sha256": directory_sha256(args.base)}
                                                         if args.base else {})})
    validation = args.validation if args.validation is not None else schemas.setting(cfg, ("base_eval", "validation"))
    lines = pretrain_text.read_lines(validation) if validation else None
    seed = args.seed if args.seed is not None else schemas.setting(cfg, ("base_eval", "seed"))
    result = base_eval.evaluate(cfg, base=base, validation_lines=lines, seed=seed, threads=args.threads)
    fileio.write_json(f"{args.output}/evaluation.json", result)
    text = base_evaluation_markdown(result)
    fileio.write_text(f"{args.output}/summary.md", text)
    sys.stdout.write(text)
    return 0


def snakemake_program() -> str:
    """This environment's snakemake (beside its python), else the one on PATH."""
    import shutil

    beside = Path(sys.executable).with_name("snakemake")
    found = str(beside) if beside.is_file() else shutil.which("snakemake")
    if found is None:
        raise SystemExit("anchormask run: no snakemake beside this python or on PATH; activate the project's "
                         "environment (.venv/bin/activate) or run `bash .ci/setup`")
    return found


def run_snakemake(argv: Sequence[str]) -> int:
    """Check the command line Snakemake would misread (anchormask.settings.command_line), then become snakemake."""
    import os


    found = command_line.problems(argv)
    if found:
        sys.stderr.write("anchormask run: the command line does not say what it means; nothing was run.\n"
                         + "".join(f"- {p}\n" for p in found))
        return 2
    program = snakemake_program()
    sys.stdout.flush()
    os.execv(program, [program, *argv])  # replaces this process: signals and the exit status are Snakemake's


def run_lm_eval(argv: Sequence[str]) -> int:
    """lm-eval's own command line, with the `anchormask` model registered and the project's tasks found
    (a --include_path of the user's own is searched too)."""
    from lm_eval.__main__ import cli_evaluate


    argv = list(argv)
    extra = None
    if "--include_path" in argv:
        at = argv.index("--include_path")
        extra = argv[at + 1]
        del argv[at:at + 2]
    unknown = tasks.unknown_tasks(_named_tasks(argv), extra)
    if unknown:  # lm-eval itself ends in a traceback ("Tasks not found")
        print(f"anchormask lm-eval: --tasks: {'; '.join(unknown)}", file=sys.stderr)
        return 2
    runlog.log_to(None)  # the model's own lines on stderr too: which base, adapter and device ran
    sys.argv = ["lm-eval", *lm_eval_device(argv), "--include_path", str(tasks.include_dir(extra))]
    cli_evaluate()
    return 0


def _named_tasks(argv: list[str]) -> list[str]:
    """The comma-separated names of lm-eval's --tasks (either spelling of the option)."""
    for i, word in enumerate(argv):
        if word.startswith("--tasks="):
            return [n for n in word.partition("=")[2].split(",") if n]
        if word == "--tasks" and i + 1 < len(argv):
            return [n for n in argv[i + 1].split(",") if n]
    return []


def lm_eval_device(argv: list[str]) -> list[str]:
    """lm-eval's command line with ``--device auto`` when it names no device: lm-eval's own default (cuda)
    is no choice of the user's, and the project's ``auto`` runs CUDA + bf16 where present, else the CPU
    (the job's log says which ran). An explicit ``--device`` is kept."""
    named = any(a == "--device" or a.startswith("--device=") for a in argv)
    return argv if named else [*argv, "--device", "auto"]


def _lm_eval_tasks(args: argparse.Namespace) -> int:
    counts = tasks.build(config.load(args.config), seed=args.seed)
    print(", ".join(f"{task}: {n} items" for task, n in counts.items()), f"(in {tasks.TASK_DIR})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="anchormask", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("hash", help="print the manifest SHA-256 of a directory (config base.sha256)")
    p.add_argument("directory")
    p.set_defaults(func=_hash)
    a = sub.add_parser("audit", help="manifests of results/ and their comparison")
    asub = a.add_subparsers(dest="audit_command", required=True)
    m = asub.add_parser("manifest", help="write a JSON manifest of every output under --results")
    m.add_argument("--results", default="results", help="results directory, relative to --workdir")
    m.add_argument("--workdir", default=".", help="the Snakemake working directory (holds .snakemake/)")
    m.add_argument("-o", "--output", default=None, help="write here instead of stdout")
    m.set_defaults(func=_manifest)
    c = asub.add_parser("compare", help="compare two manifests; always exits 0")
    c.add_argument("old")
    c.add_argument("new")
    c.set_defaults(func=_compare)
    k = asub.add_parser("check", help="report inputs of existing outputs that are missing or altered, and "
                                      "adapters whose files no longer match their recorded hashes; exits 1 if any")
    k.add_argument("--results", default="results", help="results directory, relative to --workdir")
    k.add_argument("--workdir", default=".", help="the Snakemake working directory (holds .snakemake/)")
    k.add_argument("snakemake_args", nargs=argparse.REMAINDER,
                   help="after --: your run's --configfile / --config options, so that outputs the current "
                        "configuration does not produce (an earlier one's) are listed")
    k.set_defaults(func=_check)
    w = asub.add_parser("why", help="per rule, the outputs whose job's code changed since it ran and the modules "
                                    "whose code changed (a comment or docstring is no change); always exits 0")
    w.add_argument("--results", default="results", help="results directory, relative to --workdir")
    w.add_argument("--workdir", default=".", help="the Snakemake working directory (holds .snakemake/)")
    w.set_defaults(func=_why)
    e = sub.add_parser("evaluate-base", help="masked-token scores and generation gates of a base")
    e.add_argument("--config", default="config.yaml", help="the study config (data, retrieval, generation)")
    e.add_argument("--base", default=None, help="checkpoint directory (default: the config's base.path)")
    e.add_argument("--validation", default=None,
                   help="gzip text of held-out lines (default: the config's base_eval.validation; '' for none)")
    e.add_argument("--seed", type=int, default=None, help="mask seed (default: the config's base_eval.seed)")
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("-o", "--output", default=study.BASE_EVAL_DIR, help="folder for evaluation.json and summary.md "
                   f"(default: {study.BASE_EVAL_DIR}, where rule evaluate_base writes)")
    e.set_defaults(func=_evaluate_base)
    t = sub.add_parser("lm-eval-tasks", help="rebuild the JSONL of the project's lm-eval tasks (anchormask_cloze, "
                                             "anchormask_locus) from the config's corpora and queries")
    t.add_argument("--config", default="config.yaml", help="the study config (data.*)")
    t.add_argument("--seed", type=int, default=0, help="the cloze's word choice")
    t.set_defaults(func=_lm_eval_tasks)
    # Handled in main before parsing: every argument after `run` (`lm-eval`) is Snakemake's (lm-eval's).
    sub.add_parser("lm-eval", help="lm-evaluation-harness's command line with the `anchormask` model and the "
                                   "project's tasks (anchormask_cloze, anchormask_locus) registered")
    sub.add_parser("run", help="check the --config / --configfile options of a snakemake command line (a dotted "
                               "key, a missing file, a target read as a config file), then run snakemake with it")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        return run_snakemake(argv[1:])
    if argv[:1] == ["lm-eval"]:
        return run_lm_eval(argv[1:])
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
