"""Checks of a snakemake command line that Snakemake answers with a traceback, or not at all.

Why: Snakemake parses ``--config`` and ``--configfile`` before the workflow runs, so the workflow
cannot explain the three ways people get them wrong:

- ``--config train.lr=0.002``: a dotted key. Snakemake takes top-level keys only ("Config entry
  must start with a valid identifier"); a nested key is its section as a YAML mapping,
  ``--config 'train={lr: 0.002}'``, or a file for ``--configfile``.
- ``--configfile missing.yaml``: a FileNotFoundError traceback.
- ``--configfile tiny.yaml results/base/verified.json``: both options take every word up to the
  next option, so the target is read as a second config file (or as a --config entry).

``problems`` finds these in an argument list (``anchormask run`` checks its arguments before it
hands them to Snakemake); ``check_configfiles`` is the part the workflow itself can do, on the
config files Snakemake did read (a target that exists and parses as YAML, such as a JSON output).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anchormask.fileio import InputError
from anchormask.settings.config import ConfigError, yaml_file
from anchormask.settings.layers import merge

CONFIG = ("--config", "-C")
CONFIGFILE = ("--configfile", "--configfiles")
# What the workflow writes (docs/layout.md, "Outputs"); a config file is none of these.
TARGET_SUFFIXES = (".jsonl", ".md", ".pdf", ".png", ".html", ".parquet", ".tsv", ".log")
RESULTS = "results"
KEY = re.compile(r"[a-zA-Z_][\w-]*\w$")  # Snakemake's rule for a --config key (snakemake/cli.py)


@dataclass(frozen=True)
class Occurrence:
    """One --config or --configfile on the command line: where it starts, its words, and whether its
    value was attached with `=` (then it took that one value only)."""

    option: str
    start: int
    stop: int
    values: tuple[str, ...]
    attached: bool


def occurrences(argv: Sequence[str]) -> list[Occurrence]:
    """Each --config / --configfile with the words argparse gives it: all words up to the next option."""
    found, i = [], 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            break
        name, sep, value = word.partition("=")
        if sep and name in CONFIG + CONFIGFILE and name.startswith("--"):
            found.append(Occurrence(name, i, i + 1, (value,), True))
        elif word in CONFIG + CONFIGFILE:
            stop = i + 1
            while stop < len(argv) and not argv[stop].startswith("-"):
                stop += 1
            found.append(Occurrence(word, i, stop, tuple(argv[i + 1:stop]), False))
            i = stop - 1
        i += 1
    return found


def looks_like_target(word: str) -> bool:
    """A path under results/ or a file type the workflow writes: meant as a target, not a config file."""
    path = Path(word)
    return path.parts[:1] == (RESULTS,) or path.suffix.lower() in TARGET_SUFFIXES


def command(argv: Sequence[str]) -> str:
    return "snakemake " + " ".join(shlex.quote(a) for a in argv)


def _nested(keys: list[str], value: str) -> dict:
    import yaml

    try:
        parsed: Any = yaml.safe_load(value) if value else None
    except yaml.YAMLError:
        parsed = value
    for key in reversed(keys[1:]):
        parsed = {key: parsed}
    return parsed


def dotted_fix(entries: Sequence[str]) -> list[str]:
    """--config entries with dotted keys rewritten as one YAML mapping per top-level section:
    ['train.lr=0.002', 'train.rank=8'] -> ['train={lr: 0.002, rank: 8}']; other entries unchanged."""
    import yaml

    sections: dict[str, dict] = {}
    fixed: list[str] = []
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or "." not in key:
            fixed.append(entry)
            continue
        keys = key.split(".")
        if keys[0] not in sections:
            fixed.append(keys[0])  # placeholder, filled below, where the section first appears
            sections[keys[0]] = {}
        sections[keys[0]] = merge(sections[keys[0]], _nested(keys, value))
    flow = {k: yaml.safe_dump(v, default_flow_style=True, width=10**6).strip() for k, v in sections.items()}
    return [f"{e}={flow[e]}" if e in sections else e for e in fixed]


def _config_problems(argv: Sequence[str], occ: Occurrence) -> list[str]:
    problems = []
    dotted = [e for e in occ.values if "." in e.partition("=")[0] and "=" in e]
    if dotted:
        fixed = [*argv[:occ.start], occ.option, *dotted_fix(occ.values), *argv[occ.stop:]]
        problems.append(f"--config {' '.join(dotted)}: a dotted key is not a path into the config; Snakemake takes "
                        "top-level keys only and stops with 'Config entry must start with a valid identifier'. "
                        "Give the section as a YAML mapping, or write it into a YAML file for --configfile=FILE: "
                        f"{command(fixed)}")
    targets = [e for e in occ.values if "=" not in e]
    if targets:
        kept = [e for e in occ.values if "=" in e]
        fixed = [*argv[:occ.start], *([occ.option, *kept] if kept else []), *argv[occ.stop:], "--", *targets]
        problems.append(f"--config reads every word up to the next option as KEY=VALUE, and {' '.join(targets)} is "
                        "not one (a target? Snakemake stops with 'Config entries have to be defined as name=value "
                        f"pairs'). Put the targets after `--`: {command(fixed)}")
    bad = [e for e in occ.values if "=" in e and "." not in e.partition("=")[0] and not KEY.match(e.partition("=")[0])]
    problems += [f"--config {e}: the key {e.partition('=')[0]!r} is not a name (letters, digits, _ and -, starting "
                 "with a letter or _); use the config's top-level keys (config.yaml)" for e in bad]
    return problems


def _configfile_problems(argv: Sequence[str], occ: Occurrence, cwd: Path) -> list[str]:
    files = [v for v in occ.values if not looks_like_target(v)]
    targets = [v for v in occ.values if looks_like_target(v)]
    problems = []
    if targets:
        fixed = [*argv[:occ.start], *configfile_option(files, occ.option), *argv[occ.stop:], *targets]
        problems.append(f"{occ.option} {' '.join(occ.values)}: {', '.join(targets)} would be read as a config file "
                        f"(the option takes every word up to the next option), but it is a target of the workflow. "
                        f"Give the config files to one option and the targets after them: {command(fixed)}")
    for i, name in enumerate(files):
        if not (cwd / name).is_file():
            hint = (f"; if {name} is a target (a rule name), write {occ.option}={files[0]} before it"
                    if i > 0 and not occ.attached else "")
            problems.append(f"{occ.option} {name}: file not found (relative to {cwd.resolve()}); "
                            "give the path of an existing "
                            f"YAML file, e.g. --configfile=config/seeds3.yaml{hint}")
        else:
            problems += _content_problems(occ.option, name, cwd / name)
    return problems


def _content_problems(option: str, name: str, path: Path) -> list[str]:
    """A config file read as the workflow will read it: YAML (syntax, duplicate keys, UTF-8) whose top
    level is a mapping of the config's keys, which plain Snakemake reports without the file's name."""
    try:
        content = yaml_file(path)
    except ConfigError as err:
        return [f"{option} {name}: {str(err).removeprefix(f'{path}: ')}"]
    if content is not None and not isinstance(content, dict):
        return [f"{option} {name}: its top level is a YAML {type(content).__name__}, but a config file is a mapping "
                "of the config's top-level keys (as config.yaml is), e.g. `train: {rank: 8}`; write its entries "
                "under the key they belong to"]
    return []


CONFIG_SUFFIXES = (".yaml", ".yml")  # the workflow writes no YAML: such a target is a config file misplaced


def is_config_file(word: str, cwd: str | Path = ".") -> bool:
    return Path(word).suffix.lower() in CONFIG_SUFFIXES and (Path(cwd) / word).is_file()


def misplaced_config_file(name: str, attached_to: str | None = None) -> str:
    """The message for a config file that Snakemake reads as a target: after `--configfile=A` the option
    has taken its one value, so the next word is a target."""
    fix = f" (--configfile {attached_to} {name})" if attached_to else f" (--configfile={name})"
    return (f"{name} is read as a target, not a config file: list it after --configfile without '='{fix}; "
            "as a target it has no rule, and the config is checked without it")


def _words_after_attached(argv: Sequence[str], occ: Occurrence, cwd: Path) -> list[str]:
    """The config files among the words after ``--configfile=A`` up to the next option: targets to Snakemake."""
    if not occ.attached:
        return []
    stop = occ.stop
    while stop < len(argv) and not argv[stop].startswith("-"):
        stop += 1
    return [misplaced_config_file(w, occ.values[0]) for w in argv[occ.stop:stop] if is_config_file(w, cwd)]


def configfile_option(files: Sequence[str], option: str = "--configfile") -> list[str]:
    """The words that give ``files`` to Snakemake before a target: one option for all of them (Snakemake keeps
    the last --configfile only), ``=`` for one file, ``--`` to end a list of several."""
    if not files:
        return []
    return [f"{option}={files[0]}"] if len(files) == 1 else [option, *files, "--"]


def _repeated_configfile(argv: Sequence[str]) -> list[str]:
    """Snakemake keeps the last --configfile option only (argparse's store): the files of the others are
    dropped without a word."""
    given = [occ for occ in occurrences(argv) if occ.option in CONFIGFILE]
    if len(given) < 2:
        return []
    dropped = [v for occ in given[:-1] for v in occ.values]
    files = [v for occ in given for v in occ.values]
    return [f"--configfile is given {len(given)} times, and Snakemake keeps only the last one: "
            f"{', '.join(dropped)} would be dropped without a word. List every file after one --configfile, "
            f"in the order they layer: --configfile {' '.join(files)}"]


def problems(argv: Sequence[str], cwd: str | Path = ".") -> list[str]:
    """What is wrong with the --config / --configfile options of a snakemake argument list, each with
    the corrected command; empty when they read as meant."""
    found = []
    for occ in occurrences(argv):
        if occ.option in CONFIG:
            found += _config_problems(argv, occ)
        else:
            found += _configfile_problems(argv, occ, Path(cwd)) + _words_after_attached(argv, occ, Path(cwd))
    return found + _repeated_configfile(argv)


def check_configfiles(configfiles: Sequence[str | Path], argv: Sequence[str] = (),
                      cwd: str | Path = ".") -> None:
    """InputError for a --configfile that is a target (it existed and parsed, so Snakemake read it as
    config), and for a config file that ``argv`` (Snakemake's command line) puts after ``--configfile=A``,
    which Snakemake reads as a target: called at the top of the Snakefile, before the config is validated
    and blames A's keys for what the misplaced file sets."""
    misplaced = [p for occ in occurrences(argv) if occ.option in CONFIGFILE
                 for p in _words_after_attached(argv, occ, Path(cwd))] + _repeated_configfile(argv)
    if misplaced:
        raise InputError("; ".join(misplaced))
    given = [os.path.relpath(f, cwd) for f in configfiles]
    targets = [f for f in given if looks_like_target(f)]
    if targets:
        fixed = [*configfile_option([f for f in given if f not in targets]), *targets]
        raise InputError(f"--configfile {' '.join(targets)}: read as a config file, but it is a target of the "
                         "workflow: --configfile takes every word up to the next option. Give the config files to "
                         f"one option and the targets after them: {command(fixed)} (with your other options)")
