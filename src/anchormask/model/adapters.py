"""Integrity of trained adapters: each file's SHA-256 is recorded in provenance.json at training time
and checked wherever the adapter is used (generation, probes, `anchormask audit check`).

Why: an adapter folder is an intermediate that nothing else checks. A flipped byte in its weights
loads without a word and only shows up as a different ``adapter_sha256`` in the generations; a
truncated file fails deep inside safetensors. Checking against the hashes recorded when the
adapter was written turns both into one message that names the adapter and a command that
rebuilds it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from anchormask import fileio
from anchormask.checksum import file_sha256

HASHED_FILES = ("adapter_config.json", "adapter_model.safetensors")
PROVENANCE = "provenance.json"


def file_hashes(folder: str | Path) -> dict[str, str]:
    """What training records in provenance.json: SHA-256 of the files peft loads."""
    return {name: file_sha256(Path(folder) / name) for name in HASHED_FILES}


def rebuild_command(folder: str | os.PathLike[str]) -> str:
    """A command that retrains the adapter and reruns everything made from it.

    `snakemake <folder>/adapter_model.safetensors` does not work (the rule's output is the folder),
    and deleting the folder alone does not either: Snakemake accepts a missing intermediate whose
    downstream outputs exist. --forcerun on the folder reruns its job and everything downstream.
    """
    return (f"snakemake --cores 1 --forcerun {Path(folder).as_posix()} "
            "(with the --configfile / --config options of your run)")


def _recorded_hashes(folder: Path) -> dict[str, str] | str:
    """The hashes recorded at training time, or the reason there are none."""
    try:
        record = json.loads((folder / PROVENANCE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{PROVENANCE} is missing"
    except (ValueError, UnicodeDecodeError):
        return f"{PROVENANCE} is not valid JSON"
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or not set(HASHED_FILES) <= set(files):
        return f"{PROVENANCE} records no file hashes, so the files cannot be checked"
    return files


def problems(folder: str | Path) -> list[str]:
    """What is wrong with an adapter folder against its provenance; empty when it is intact."""
    folder = Path(folder)
    if not folder.is_dir():
        return ["the adapter folder is missing"]
    missing = [name for name in HASHED_FILES if not (folder / name).is_file()]
    if missing:
        return [f"{name} is missing" for name in missing]
    recorded = _recorded_hashes(folder)
    if isinstance(recorded, str):
        return [recorded]
    found = []
    for name in HASHED_FILES:
        actual = file_sha256(folder / name)
        if actual != recorded[name]:
            found.append(f"{name} ({(folder / name).stat().st_size} bytes) has SHA-256 {actual[:12]}…, but "
                         f"{PROVENANCE} recorded {recorded[name][:12]}… at training time: altered or truncated "
                         "since")
    return found


def _no_such_adapter(folder: Path) -> str:
    """A name that was never trained (a typo, most often): the nearest existing names, not a rebuild."""
    import difflib

    existing = sorted(p.name for p in folder.parent.iterdir() if p.is_dir()) if folder.parent.is_dir() else []
    close = difflib.get_close_matches(folder.name, existing, n=3, cutoff=0.5)
    nearest = (f"; the nearest in {folder.parent.as_posix()}/: {', '.join(close)}" if close else
               f"; {folder.parent.as_posix()}/ holds {len(existing)} adapter folders")
    return (f"adapter {folder.as_posix()}: no adapter folder of that name exists{nearest}. Check the name "
            "(<strategy>_<targets>_n<size>_s<steps>_seed<seed>); one the config defines but that was not "
            f"trained yet is made by `snakemake --cores 1 {folder.as_posix()}` (with your run's config options)")


def verify(folder: str | Path) -> dict[str, Any]:
    """The adapter's provenance record, after checking every hashed file; InputError otherwise."""
    if not Path(folder).is_dir():
        raise fileio.InputError(_no_such_adapter(Path(folder)))
    found = problems(folder)
    if found:
        raise fileio.InputError(f"adapter {Path(folder).as_posix()}: {'; '.join(found)}. Rebuild it and what was "
                            f"made from it: {rebuild_command(folder)}")
    return fileio.read_json(Path(folder) / PROVENANCE)
