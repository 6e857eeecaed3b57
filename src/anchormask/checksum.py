"""SHA-256 of files and of checkpoint directories.

A directory's manifest hash is the SHA-256 of the text ``"<relative path>\\t<sha256>\\n"`` for
every regular file below it, sorted by relative POSIX path. Hidden files (a leading dot in
any path part) are skipped so that editor or cache droppings do not change the identity, and
so is a top-level README.md: documentation that no loader reads.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_CHUNK = 1 << 20
_DOCUMENTATION = {"README.md"}


def file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_files(directory: str | os.PathLike[str]) -> list[Path]:
    root = Path(directory)
    files = [
        p for p in root.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
        and p.relative_to(root).as_posix() not in _DOCUMENTATION
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def directory_manifest(directory: str | os.PathLike[str]) -> dict[str, str]:
    """Relative POSIX path -> SHA-256 for every file that counts towards the manifest hash."""
    root = Path(directory)
    return {p.relative_to(root).as_posix(): file_sha256(p) for p in manifest_files(root)}


def manifest_sha256(manifest: dict[str, str]) -> str:
    text = "".join(f"{name}\t{digest}\n" for name, digest in sorted(manifest.items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def directory_sha256(directory: str | os.PathLike[str]) -> str:
    return manifest_sha256(directory_manifest(directory))
