"""Audit manifests of a results tree: what bytes each output holds and what made it.

Why: "rerunning a changed config reruns exactly what depends on it" is a claim about bytes.
A manifest records, for every output under results/, its SHA-256 (a directory output, such
as an adapter, by its manifest hash, see :mod:`anchormask.checksum`) together with what
Snakemake recorded for the job that wrote it (rule, params and code hashes, inputs), so two
manifests taken before and after a rerun show which outputs really changed.

Logs and benchmarks are listed but marked volatile: they hold timings and timestamps and
differ on every run by design, so a comparison reports them apart.

``code_changes`` answers why a job would rerun for its code: the modules whose code digest differs
from the one its job recorded (what counts as a change: docs/reproducibility.md).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from base64 import urlsafe_b64decode
from pathlib import Path
from typing import Any

from anchormask.checksum import directory_manifest, file_sha256, manifest_sha256
from anchormask.fileio import read_safetensors_header
from anchormask.model import adapters
from anchormask.repro import codedigest

FORMAT = 1
VOLATILE_DIRS = ("logs", "benchmarks")
METADATA_DIR = Path(".snakemake") / "metadata"


def _text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def snakemake_records(workdir: str | os.PathLike[str] = ".") -> dict[str, dict[str, Any]]:
    """Output path -> Snakemake's metadata record for it.

    Snakemake 9 keeps one JSON file per output in .snakemake/metadata/, named by the
    URL-safe base64 of the output path; names longer than the file-system limit are split
    into chunks, all but the last prefixed with "@" and nested as directories.
    """
    root = Path(workdir) / METADATA_DIR
    records: dict[str, dict[str, Any]] = {}
    if not root.is_dir():
        return records
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        parts = path.relative_to(root).parts
        encoded = "".join(p[1:] if p.startswith("@") else p for p in parts)
        try:
            name = urlsafe_b64decode(encoded.encode()).decode()
            records[os.path.normpath(name)] = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError, OSError):
            continue  # a foreign or half-written file: not ours to interpret
    return records


def job_summary(record: dict[str, Any] | None) -> dict[str, Any]:
    """The parts of a metadata record that identify the job: hashed, so manifests stay small."""
    if record is None:
        return {"rule": None}
    params = record.get("params")
    code = record.get("code")
    return {
        "rule": record.get("rule"),
        "params_sha256": None if params is None else _text_sha256(json.dumps(params, sort_keys=True)),
        "code_sha256": None if code is None else _text_sha256(str(code)),
        "shellcmd": record.get("shellcmd"),
        "input": sorted(record.get("input") or []),
        "incomplete": bool(record.get("incomplete", False)),
    }


def is_volatile(relpath: str, results: str = "results") -> bool:
    """Logs and benchmarks change on every run (timings, timestamps)."""
    parts = Path(relpath).parts
    return len(parts) > 1 and parts[0] == Path(results).name and parts[1] in VOLATILE_DIRS


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def build_manifest(results: str | os.PathLike[str] = "results",
                   workdir: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """Every output under `results` (relative to `workdir`) with its hash and its job.

    A directory that Snakemake recorded as an output is one entry, hashed as a whole;
    hidden paths (e.g. the .tmp-* staging dirs of an interrupted job) are not outputs and
    are only counted.
    """
    work = Path(workdir)
    records = snakemake_records(work)
    entries: dict[str, dict[str, Any]] = {}
    hidden = 0
    base = work / results
    for dirpath, dirnames, filenames in os.walk(base):
        here = Path(dirpath)
        rel_dir = here.relative_to(work)
        keep = []
        for d in sorted(dirnames):
            rel = rel_dir / d
            if d.startswith("."):
                hidden += 1
            elif os.path.normpath(rel) in records:
                manifest = directory_manifest(here / d)
                entries[rel.as_posix()] = {"kind": "directory", "sha256": manifest_sha256(manifest),
                                           "files": len(manifest)}
            else:
                keep.append(d)
        dirnames[:] = keep
        for f in sorted(filenames):
            rel = rel_dir / f
            if _hidden(rel.relative_to(results)):
                hidden += 1
                continue
            entries[rel.as_posix()] = {"kind": "file", "sha256": file_sha256(here / f)}
    for relpath, entry in entries.items():
        entry["volatile"] = is_volatile(relpath, str(results))
        entry.update(job_summary(records.get(os.path.normpath(relpath))))
    return {"format": FORMAT, "results": Path(results).as_posix(), "hidden_skipped": hidden,
            "entries": dict(sorted(entries.items()))}


def compare_manifests(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[str]]:
    """Paths by category: changed / unchanged / added / removed (non-volatile), and volatile.

    Volatile entries (logs, benchmarks) that exist in both are listed under
    "volatile_changed" or "volatile_unchanged" so they do not drown the real changes.
    """
    a, b = old["entries"], new["entries"]
    out: dict[str, list[str]] = {k: [] for k in ("changed", "unchanged", "added", "removed",
                                                   "volatile_changed", "volatile_unchanged")}
    for path in sorted(set(a) | set(b)):
        if path not in b:
            out["removed"].append(path)
        elif path not in a:
            out["added"].append(path)
        else:
            same = a[path]["sha256"] == b[path]["sha256"]
            prefix = "volatile_" if (a[path].get("volatile") or b[path].get("volatile")) else ""
            out[prefix + ("unchanged" if same else "changed")].append(path)
    return out


def format_comparison(result: dict[str, list[str]]) -> str:
    """Counts first (one line each), then the lists of everything but the unchanged."""
    lines = [f"{k}: {len(v)}" for k, v in result.items()]
    for key in ("changed", "added", "removed", "volatile_changed"):
        if result[key]:
            lines.append(f"\n{key}:")
            lines.extend(f"  {p}" for p in result[key])
    return "\n".join(lines) + "\n"


def write_manifest(manifest: dict[str, Any], path: str | os.PathLike[str] | None) -> str:
    """Canonical JSON (sorted keys), to `path` or returned for stdout when path is None."""
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    if path is not None:
        Path(path).write_text(text)
    return text


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if data.get("format") != FORMAT or "entries" not in data:
        raise ValueError(f"{path}: not an anchormask audit manifest (format {FORMAT})")
    return data


# ---------------------------------------------------------------------------------------------
# Missing or altered intermediates. Snakemake treats a deleted intermediate as fine while the
# outputs made from it exist ("Nothing to be done"), and it never looks inside an adapter folder;
# this check reports both, for every output under `results` that exists.

def _is_adapter(rel: str) -> bool:
    parts = Path(rel).parts
    return len(parts) >= 3 and parts[-2] == "adapters" and not parts[-1].startswith(".")


def _users_of_inputs(records: dict[str, dict[str, Any]], work: Path, results: str) -> dict[str, list[str]]:
    """Input path -> the existing, complete outputs under `results` that Snakemake built from it."""
    users: dict[str, list[str]] = {}
    for output, record in sorted(records.items()):
        if Path(output).parts[:1] != Path(results).parts[:1] or record.get("incomplete"):
            continue
        if not (work / output).exists():
            continue
        for path in record.get("input") or []:
            users.setdefault(os.path.normpath(path), []).append(output)
    return users


def _recorded_checksum(records: dict[str, dict[str, Any]], output: str, path: str) -> str | None:
    checksums = records[output].get("input_checksums") or {}
    value = checksums.get(path) or checksums.get(os.path.normpath(path))
    return value.split(":", 1)[-1] if isinstance(value, str) else None


def _input_problem(work: Path, path: str, outputs: list[str], records) -> str | None:
    if _is_adapter(path):
        found = adapters.problems(work / path)
        return "; ".join(found) if found else None
    if not (work / path).exists():
        return "missing"
    for output in outputs:
        recorded = _recorded_checksum(records, output, path)
        if recorded and (work / path).is_file() and file_sha256(work / path) != recorded:
            return f"changed since {output} was built from it (SHA-256 {recorded[:12]}… then)"
    return None


def check_intermediates(results: str | os.PathLike[str] = "results",
                        workdir: str | os.PathLike[str] = ".") -> list[dict[str, Any]]:
    """Inputs of existing outputs that are gone or altered, and adapters that fail their hashes.

    One entry per problem: path, what is wrong, the outputs built from it, and a command that
    rebuilds it and everything made from it.
    """
    work = Path(workdir)
    records = snakemake_records(work)
    users = _users_of_inputs(records, work, Path(results).as_posix())
    present = work / results / "adapters"
    for folder in sorted(present.iterdir()) if present.is_dir() else []:
        rel = os.path.normpath(folder.relative_to(work))
        if folder.is_dir() and _is_adapter(rel):
            users.setdefault(rel, [])
    found = []
    for path, outputs in sorted(users.items()):
        problem = _input_problem(work, path, outputs, records)
        if problem:
            fix = (adapters.rebuild_command(path) if _is_adapter(path) or path.startswith(str(results))
                   else f"restore {path}, then run snakemake again")
            found.append({"path": path, "problem": problem, "used_by": outputs, "fix": fix})
    return found


def format_check(found: list[dict[str, Any]]) -> str:
    if not found:
        return "every input of every output is present and unaltered; every adapter matches its hashes\n"
    lines = [f"{len(found)} missing or altered intermediate(s):"]
    for item in found:
        used = item["used_by"]
        lines.append(f"  {item['path']}: {item['problem']}")
        lines.append(f"    used by {len(used)} output(s){': ' + ', '.join(used[:3]) if used else ''}"
                     f"{' …' if len(used) > 3 else ''}")
        lines.append(f"    fix: {item['fix']}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# The cheap check every DAG build can afford (common.smk): existence and sizes, no hashing, of
# the adapters that existing outputs were built from. Snakemake alone says "Nothing to be done".

def _safetensors_size(path: Path) -> int | None:
    """The file size a safetensors header describes (8 + header + the end of the last tensor), or None
    when the header itself is unreadable."""
    read = read_safetensors_header(path)
    if read is None:
        return None
    length, header = read
    try:
        ends = [int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    return 8 + length + max(ends, default=0)


def adapter_quick_problem(folder: Path) -> str | None:
    """What is wrong with an adapter folder by existence and size alone; None when nothing shows."""
    if not folder.is_dir():
        return "the adapter folder is missing"
    missing = [n for n in (*adapters.HASHED_FILES, adapters.PROVENANCE) if not (folder / n).is_file()]
    if missing:
        return f"{', '.join(missing)} missing"
    weights = folder / "adapter_model.safetensors"
    expected, actual = _safetensors_size(weights), weights.stat().st_size
    if expected != actual:
        described = "an unreadable header" if expected is None else f"a header that describes {expected} bytes"
        return f"adapter_model.safetensors has {actual} bytes and {described}: truncated or altered"
    return None


def damaged_adapters(results: str | os.PathLike[str] = "results",
                     workdir: str | os.PathLike[str] = ".") -> list[dict[str, Any]]:
    """Adapters that existing outputs were built from (Snakemake's records) and that fail the cheap check,
    each with those outputs and the command that rebuilds it (as `check_intermediates`)."""
    work = Path(workdir)
    users = _users_of_inputs(snakemake_records(work), work, Path(results).as_posix())
    found = []
    for path, outputs in sorted(users.items()):
        problem = adapter_quick_problem(work / path) if _is_adapter(path) else None
        if problem:
            found.append({"path": path, "problem": problem, "used_by": outputs, "fix": adapters.rebuild_command(path)})
    return found


def format_damaged(found: list[dict[str, Any]]) -> str:
    """The warning at the top of a run; empty when every adapter looks whole."""
    if not found:
        return ""
    lines = [f"WARNING: {len(found)} adapter(s) damaged after outputs were made from them; Snakemake will not "
             "rebuild them by itself (the outputs exist), so the results no longer match their adapters:"]
    for item in found:
        used = item["used_by"]
        lines += [f"  {item['path']}: {item['problem']}",
                  f"    used by {len(used)} output(s): {', '.join(used[:3])}{' …' if len(used) > 3 else ''}",
                  f"    fix: {item['fix']}"]
    lines.append("  (existence and sizes only; `anchormask audit check` compares every adapter with its recorded "
                 "hashes)")
    return "\n".join(lines) + "\n"


def recorded_code(record: dict[str, Any]) -> str | None:
    """The ``code`` param (per-module digests, repro/codedigest.py) of a job's metadata record, or the
    64-hex digest of a run from before them; None for a rule without one. Snakemake records each param
    as its repr, in the rule's order."""
    for text in record.get("params") or []:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, str) and (value.startswith('{"') and codedigest.SCRIPT_LABEL in value
                                       or re.fullmatch(r"[0-9a-f]{64}", value)):
            return value
    return None


def code_changes(workdir: str | os.PathLike[str] = ".", results: str = "results") -> dict[str, dict[str, Any]]:
    """Rule -> {outputs, modules}: the recorded outputs under ``results`` whose job's code changed since it
    ran, and the modules (labels of ``codedigest.script_code``) whose code differs; ``modules`` is None for
    a record from before the per-module digests (its whole code param differs once)."""
    work = Path(workdir)
    scripts, package = work / "workflow" / "scripts", work / "src" / codedigest.PACKAGE
    package = package if package.is_dir() else codedigest.PACKAGE_DIR
    found: dict[str, dict[str, Any]] = {}
    for output, record in sorted(snakemake_records(work).items()):
        code = recorded_code(record)
        if code is None or not Path(output).parts[:1] == Path(results).parts[:1]:
            continue
        old_form = not code.startswith("{")
        changed = None if old_form else codedigest.changed_modules(code, scripts, package)
        if old_form or changed:
            entry = found.setdefault(record.get("rule") or "?", {"outputs": [], "modules": set()})
            entry["outputs"].append(output)
            entry["modules"] = None if changed is None or entry["modules"] is None else entry["modules"] | set(changed)
    return {rule: {**e, "modules": None if e["modules"] is None else sorted(e["modules"])} for rule, e in found.items()}


def format_code_changes(found: dict[str, dict[str, Any]]) -> str:
    """``anchormask audit why``: per rule, how many outputs a code change reruns and which modules changed."""
    if not found:
        return "no job's code changed since it ran: a rerun now would be for its inputs or params only\n"
    lines = []
    for rule, entry in sorted(found.items()):
        n = len(entry["outputs"])
        why = (f"code changed in {', '.join(entry['modules'])}" if entry["modules"] is not None else
               "recorded before the per-module code digests (such a job reruns once)")
        lines.append(f"{rule}: {n} output(s): {why}")
    return "\n".join(lines) + "\n"
