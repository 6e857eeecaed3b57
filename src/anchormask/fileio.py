"""Atomic, deterministic file output and strict JSONL input.

Every artefact is written to a hidden temporary sibling and renamed into place, so a
killed job leaves either the complete file or nothing that looks like it. The temporary's name
carries its writer's process id and host (``.tmp-NAME-pidPID@HOST-XXXXXXXX``), so that a kill's
leftovers can be told from a running writer's and removed (``sweep_temporaries``).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


class InputError(ValueError):
    """Bad input: the message names the file, the place and the fix."""


@contextlib.contextmanager
def stops_plainly():
    """Bad input found while the workflow is read ends the run with its message alone: Snakemake would print
    the frames the error passed through after it, and the message already names the file, key and fix."""
    try:
        yield
    except InputError as err:
        raise SystemExit(f"{type(err).__name__}: {err}") from None


def canonical_json(obj: Any) -> str:
    """One JSON text per object: sorted keys, no spaces, ASCII; byte-stable across runs."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def pretty_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n"


# ---------------------------------------------------------------------------------------------
# Temporaries. A writer killed with SIGKILL (or the machine going down) runs no cleanup, so its
# temporary stays; the name says whose it was, and a temporary whose process is gone is removed.

_HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:40] or "host"
# mkstemp / mkdtemp end the name with 8 of [a-z0-9_]; a host has no "@", so the last "-pid…@" is ours.
_TEMPORARY = re.compile(r"\.tmp-(?P<target>.+)-pid(?P<pid>\d+)@(?P<host>[A-Za-z0-9._-]+)-[a-z0-9_]+")
_EARLIER = re.compile(r"\.tmp-(?P<target>.+)-[a-z0-9_]{8}")  # before the name carried its writer


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _stale(name: str) -> re.Match | None:
    """The name's parts when it is a temporary of this host's writer that no longer runs."""
    match = _TEMPORARY.fullmatch(name)
    if match and match["host"] == _HOST and not _alive(int(match["pid"])):
        return match
    return None


def _remove(tmp: Path, match: re.Match, log) -> Path:
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.unlink(missing_ok=True)
    log.write(f"removed {tmp}: a half-written temporary of {tmp.parent / match['target']}, left by a writer "
              f"(pid {match['pid']}) that no longer runs\n")
    return tmp


def _unowned_note(tmp: Path, match: re.Match | None, log) -> None:
    """A temporary whose writer this host cannot check is named, not removed: it may still be written."""
    writer = (f"a writer on host {match['host']} (pid {match['pid']}), which this host cannot check" if match
              else "an earlier version's writer, whose name does not say which process wrote it")
    log.write(f"kept {tmp}: a temporary of {writer}; delete it if no job is writing there\n")


def sweep_temporaries(root: str | os.PathLike[str] = "results", log=None) -> list[Path]:
    """Remove every temporary under ``root`` whose writer (a process of this host) no longer runs, with a
    line per file on ``log`` (stderr); those of other hosts, and those named the earlier way, are named
    only. A running writer's temporary is never touched. Returns the removed paths."""
    log = log or sys.stderr
    removed, pending = [], [Path(root)]
    while pending:
        try:
            entries = sorted(os.scandir(pending.pop()), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            path, ours = Path(entry.path), _TEMPORARY.fullmatch(entry.name)
            if ours and ours["host"] == _HOST:  # a running writer's stays, and its inside is its own
                removed += [_remove(path, ours, log)] if not _alive(int(ours["pid"])) else []
            elif ours or _EARLIER.fullmatch(entry.name):
                _unowned_note(path, ours, log)
            elif entry.is_dir(follow_symlinks=False):
                pending.append(path)
    return removed


def _sweep_own(path: Path) -> None:
    """A writer starting on ``path`` removes what a killed writer of the same target left there."""
    prefix = f".tmp-{path.name}-"
    for entry in sorted(os.scandir(path.parent), key=lambda e: e.name):
        match = _stale(entry.name) if entry.name.startswith(prefix) else None
        if match and match["target"] == path.name:
            _remove(Path(entry.path), match, sys.stderr)


def _tmp_sibling(path: Path, *, directory: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_own(path)
    prefix = f".tmp-{path.name}-pid{os.getpid()}@{_HOST}-"
    if directory:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=path.parent))
    fd, name = tempfile.mkstemp(prefix=prefix, dir=path.parent)
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def _atomic(path: str | os.PathLike[str], *, directory: bool) -> Iterator[Path]:
    """Yield a temporary sibling (a file or a directory); on success it replaces ``path`` in one rename
    (a directory whole), on failure it is removed."""
    final = Path(path)
    tmp = _tmp_sibling(final, directory=directory)
    try:
        yield tmp
        os.chmod(tmp, 0o755 if directory else 0o644)
        if directory and final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        if directory:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def atomic_path(path: str | os.PathLike[str]) -> contextlib.AbstractContextManager[Path]:
    """Yield a temporary file path; on success it replaces ``path`` in one rename."""
    return _atomic(path, directory=False)


def atomic_dir(path: str | os.PathLike[str]) -> contextlib.AbstractContextManager[Path]:
    """Yield a temporary directory; on success it replaces ``path`` (a directory) whole."""
    return _atomic(path, directory=True)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    write_text(path, pretty_json(obj))


def write_jsonl(path: str | os.PathLike[str], records: Iterable[dict[str, Any]]) -> int:
    lines = [canonical_json(r) + "\n" for r in records]
    write_text(path, "".join(lines))
    return len(lines)


def write_gzip_text(path: str | os.PathLike[str], text: str) -> None:
    """Gzip with mtime 0 and no file name, so equal text gives equal bytes."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write(text.encode("utf-8"))


def read_json(path: str | os.PathLike[str]) -> Any:
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{p}: file not found") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{p}: line {err.lineno}: invalid JSON ({err.msg})") from None
    except UnicodeDecodeError:
        for lineno, raw in enumerate(p.read_bytes().splitlines(keepends=True), start=1):
            _decode_line(p, lineno, raw)  # raises, naming the line
        raise


def _decode_line(path: Path, lineno: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: line {lineno}: byte 0x{raw[err.start]:02x} at column {err.start + 1} is not "
                         "UTF-8; save the file as UTF-8 (or fix that character)") from None


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read JSON Lines, failing with file and line number on the first bad line."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: file not found")
    records: list[dict[str, Any]] = []
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = _decode_line(p, lineno, raw)
            if not line.strip():
                raise InputError(f"{p}: line {lineno}: empty line; remove it")
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{p}: line {lineno}: invalid JSON ({err.msg}); fix or remove the line") from None
            if not isinstance(obj, dict):
                raise InputError(f"{p}: line {lineno}: expected a JSON object, got {type(obj).__name__}")
            records.append(obj)
    return records


SAFETENSORS_HEADER_LIMIT = 100 * 2**20  # safetensors' own cap on a header's length


def read_safetensors_header(path: str | os.PathLike[str]) -> tuple[int, dict[str, Any]] | None:
    """A safetensors file's (header length, header) without reading any tensor, or None when the
    header cannot be read (a truncated or altered file). Tensor entries map a name to its dtype,
    shape and data_offsets; ``__metadata__`` holds strings."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < length <= SAFETENSORS_HEADER_LIMIT:
            return None
        try:
            header = json.loads(fh.read(length))
        except ValueError:
            return None
    return (length, header) if isinstance(header, dict) else None
