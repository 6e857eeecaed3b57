"""The first node of the DAG: the base checkpoint matches its pinned SHA-256."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anchormask import checksum, io


class ChecksumError(io.InputError):
    """The base on disk is not the base that config.yaml pins."""


# What a Hugging Face checkpoint folder holds: the file names a loader reads.
WEIGHTS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json", "*.pt")
TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "vocab.*", "merges.txt", "tokenizer.model", "spiece.model",
             "special_tokens_map.json", "added_tokens.json", "*.tiktoken")
OTHER = ("config.json", "generation_config.json", "*.py", "chat_template.*")


def _matches(name: str, patterns) -> bool:
    from fnmatch import fnmatch

    return any(fnmatch(Path(name).name, pattern) for pattern in patterns)


def _suspects(manifest: dict[str, str]) -> list[str]:
    """Why the hash may differ, by file name: a kind of file that is missing, or files no loader reads."""
    found = []
    if not any(_matches(n, WEIGHTS) for n in manifest):
        found.append("missing: no weights file (*.safetensors or *.bin)")
    if not any(_matches(n, TOKENIZER) for n in manifest):
        found.append("missing: no tokenizer file (tokenizer.json, vocab.txt, ...)")
    extra = [n for n in manifest if not _matches(n, WEIGHTS + TOKENIZER + OTHER)]
    if extra:
        found.append(f"not a checkpoint file, added to the folder?: {', '.join(extra)}")
    return found


def verify_base(path: str, expected: str) -> dict[str, Any]:
    """The verification record (no timestamps: an unchanged base gives the same bytes)."""
    root = Path(path)
    if not (root / "config.json").is_file():
        raise ChecksumError(f"{root}: missing config.json; base.path in config.yaml must name a complete "
                            "checkpoint directory (config.json, weights, tokenizer files)")
    manifest = checksum.directory_manifest(root)
    actual = checksum.manifest_sha256(manifest)
    if actual != expected:
        raise ChecksumError(
            f"{root}: manifest SHA-256 mismatch for base.sha256 in config.yaml\n"
            f"  expected {expected}\n  actual   {actual}\n"
            f"  files: " + ", ".join(f"{name} {digest[:12]}" for name, digest in manifest.items()) + "\n"
            + "".join(f"  {line}\n" for line in _suspects(manifest)) +
            "  The checkpoint changed or is not the one pinned. If you replaced it on purpose, put the actual "
            "hash in base.sha256 (`anchormask hash " + str(root) + "` prints it); otherwise restore the files.")
    return {
        "path": str(root), "sha256": actual, "hash": "manifest: sha256 of sorted '<path>\\t<sha256>\\n' lines",
        "files": {name: {"sha256": digest, "bytes": (root / name).stat().st_size}
                  for name, digest in manifest.items()},
    }


def write_verified(path: str, expected: str, out: str) -> None:
    io.write_json(out, verify_base(path, expected))
