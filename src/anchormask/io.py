"""Atomic, deterministic file output and strict JSONL input.

Every artefact is written to a hidden temporary sibling and renamed into place, so a
killed job leaves either the complete file or nothing that looks like it.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


class InputError(ValueError):
    """Bad input: the message names the file, the place and the fix."""


def canonical_json(obj: Any) -> str:
    """One JSON text per object: sorted keys, no spaces, ASCII; byte-stable across runs."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def pretty_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n"


def _tmp_sibling(path: Path, *, directory: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".tmp-{path.name}-"
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
