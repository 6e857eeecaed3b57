"""The first node of the DAG: the base checkpoint matches its pinned SHA-256."""

from __future__ import annotations

import json
import os
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from anchormask import checksum, fileio

# The workflow puts here, per verified.json it will write, the config key (and file) that set base.path and
# base.sha256: a message names the layer to edit, and the keys' place is no param, so moving base.sha256 to
# another layer reruns nothing.
KEYS_ENV = "ANCHORMASK_BASE_KEYS"


class ChecksumError(fileio.InputError):
    """The base on disk is not the base that the config pins."""


# What a Hugging Face checkpoint folder holds: the file names a loader reads.
WEIGHTS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json", "*.pt")
TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "vocab.*", "merges.txt", "tokenizer.model", "spiece.model",
             "special_tokens_map.json", "added_tokens.json", "*.tiktoken")
OTHER = ("config.json", "generation_config.json", "*.py", "chat_template.*")


def _matches(name: str, patterns) -> bool:
    return any(fnmatch(Path(name).name, pattern) for pattern in patterns)


# The files a slow tokenizer reads, by tokenizer_class (less a "Fast" suffix): what a folder without
# tokenizer.json must hold instead. A class not listed needs some vocabulary file (VOCABULARY).
SLOW_TOKENIZER_FILES = {
    "BertTokenizer": ("vocab.txt",), "DistilBertTokenizer": ("vocab.txt",), "ElectraTokenizer": ("vocab.txt",),
    "RobertaTokenizer": ("vocab.json", "merges.txt"), "GPT2Tokenizer": ("vocab.json", "merges.txt"),
    "Qwen2Tokenizer": ("vocab.json", "merges.txt"), "LlamaTokenizer": ("tokenizer.model",),
    "GemmaTokenizer": ("tokenizer.model",), "T5Tokenizer": ("spiece.model",),
}
VOCABULARY = ("vocab.*", "merges.txt", "*.model", "*.tiktoken")


def _json_file(path: Path) -> dict[str, Any]:
    import json

    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _auto_map_modules(auto_map: Any) -> list[str]:
    """The .py files an auto_map names ("module.Class", or [slow, fast] for AutoTokenizer); code that
    lives in another repository ("repo--module.Class") is not the folder's to hold."""
    values = []
    for value in (auto_map or {}).values() if isinstance(auto_map, dict) else []:
        values += value if isinstance(value, list) else [value]
    return sorted({f"{v.rsplit('.', 1)[0]}.py" for v in values if isinstance(v, str) and "--" not in v and "." in v})


def _relative_imports(root: Path) -> list[str]:
    """The .py files that the folder's own modules import relatively (`from .generation_utils import ...`)."""
    import re

    found = set()
    for module in root.glob("*.py"):
        text = module.read_text(encoding="utf-8", errors="replace")
        found |= {f"{name}.py" for name in re.findall(r"^\s*from\s+\.(\w+)\s+import", text, re.M)}
    return sorted(found)


def _missing_weights(root: Path, names: list[str]) -> list[str]:
    if not any(_matches(n, WEIGHTS) for n in names):
        return ["weights: no *.safetensors or *.bin file (model.safetensors, or the shards of "
                "model.safetensors.index.json)"]
    missing = []
    for index in (n for n in names if n.endswith(".index.json")):
        shards = sorted(set(_json_file(root / index).get("weight_map", {}).values()))
        missing += [f"weights: {shard} (a shard that {index} names)" for shard in shards if shard not in names]
    return missing


def _missing_tokenizer(root: Path, names: list[str]) -> list[str]:
    if "tokenizer.json" in names:
        return []
    settings = _json_file(root / "tokenizer_config.json")
    if "tokenizer_config.json" not in names:
        return ["tokenizer: tokenizer.json (or tokenizer_config.json with the slow tokenizer's vocabulary files)"]
    cls = str(settings.get("tokenizer_class") or "").removesuffix("Fast")
    needed = SLOW_TOKENIZER_FILES.get(cls)
    if needed is None:  # a class of the checkpoint's own code, or one not listed: some vocabulary file
        return [] if any(_matches(n, VOCABULARY) for n in names) else [
            f"tokenizer: tokenizer.json, or the vocabulary files of the slow tokenizer {cls or '(no tokenizer_class)'} "
            "that tokenizer_config.json names (vocab.json, vocab.txt, merges.txt, tokenizer.model, ...)"]
    absent = [n for n in needed if n not in names]
    return [f"tokenizer: tokenizer.json, or {' and '.join(absent)} for the slow {cls} that tokenizer_config.json "
            "names"] if absent else []


def missing_files(root: Path) -> list[str]:
    """What a loader of this checkpoint needs and the folder lacks: config.json, weights, tokenizer
    files (tokenizer.json or the slow tokenizer's vocabulary), and the .py files that config.json's and
    tokenizer_config.json's auto_map name or that those modules import relatively."""
    names = [p.name for p in root.iterdir() if p.is_file()] if root.is_dir() else []
    if "config.json" not in names:
        return ["config.json"]
    code = _auto_map_modules(_json_file(root / "config.json").get("auto_map"))
    code += _auto_map_modules(_json_file(root / "tokenizer_config.json").get("auto_map"))
    code += _relative_imports(root)
    missing = _missing_weights(root, names) + _missing_tokenizer(root, names)
    return missing + [f"code: {name} (auto_map or a relative import names it)"
                      for name in sorted(set(code)) if name not in names]


def _safetensors_problem(path: Path) -> str | None:
    """What is wrong with a safetensors file's framing: 8 bytes of header length, a JSON header, then the
    tensors up to the last offset it names; a truncated file (hashed again, so its hash matches) fails here
    instead of deep in the loader with a message that names no file."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        prefix = fh.read(8)
        length = int.from_bytes(prefix, "little") if len(prefix) == 8 else None
        if length is None or 8 + length > size:
            return f"{path.name}: {size} bytes, shorter than its safetensors header says"
        try:
            header = json.loads(fh.read(length))
        except ValueError:
            return f"{path.name}: its safetensors header is not JSON (not a safetensors file, or damaged)"
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + length + end != size:
        return f"{path.name}: {size} bytes, but its header names {8 + length + end} (truncated or appended to)"
    return None


def damaged_weights(root: Path) -> list[str]:
    return [problem for path in sorted(root.glob("*.safetensors")) if (problem := _safetensors_problem(path))]


def _strangers(manifest: dict[str, str]) -> list[str]:
    """Files no loader reads: why the hash of an otherwise complete folder may differ."""
    extra = [n for n in manifest if not _matches(n, WEIGHTS + TOKENIZER + OTHER)]
    return [f"not a checkpoint file, added to the folder?: {', '.join(extra)}"] if extra else []


def keys_from_environment(output: str) -> dict[str, str]:
    """Where the config set base.path and base.sha256 for the job writing ``output``, as the workflow put it in
    the environment (``KEYS_ENV``); the config.yaml keys when it did not."""
    found = json.loads(os.environ.get(KEYS_ENV) or "{}").get(output, {})
    return {key: found.get(key, f"base.{key} in config.yaml") for key in ("path", "sha256")}


def verify_base(path: str, expected: str, keys: dict[str, str] | None = None) -> dict[str, Any]:
    """The verification record (no timestamps: an unchanged base gives the same bytes).

    ``keys``: where the config set base.path and base.sha256 (``keys_from_environment``), for the messages.
    Missing files are named before the hashes are compared: "the tokenizer is missing" says
    more than a mismatch over the files that are there."""
    keys = keys or {"path": "base.path in config.yaml", "sha256": "base.sha256 in config.yaml"}
    root = Path(path)
    missing = missing_files(root)
    if missing:
        raise ChecksumError(
            f"{root}: the checkpoint folder ({keys['path']}) lacks files its loader needs:\n"
            + "".join(f"  missing {item}\n" for item in missing) +
            "  Restore them from where the checkpoint came from (the model's download; `git checkout -- "
            f"{root}` for the embedded base), or point base.path at a complete checkpoint folder.")
    damaged = damaged_weights(root)
    if damaged:
        raise ChecksumError(
            f"{root}: weights files a loader cannot read:\n" + "".join(f"  {item}\n" for item in damaged) +
            "  Restore them from where the checkpoint came from (the model's download; `git checkout -- "
            f"{root}` for the embedded base); a hash taken of the damaged file does not make it whole.")
    manifest = checksum.directory_manifest(root)
    actual = checksum.manifest_sha256(manifest)
    if actual != expected:
        raise ChecksumError(
            f"{root}: manifest SHA-256 mismatch for {keys['sha256']}\n"
            f"  expected {expected}\n  actual   {actual}\n"
            f"  files: " + ", ".join(f"{name} {digest[:12]}" for name, digest in manifest.items()) + "\n"
            + "".join(f"  {line}\n" for line in _strangers(manifest)) +
            "  The checkpoint changed or is not the one pinned. If you replaced it on purpose, put the actual "
            f"hash in {keys['sha256']} (`anchormask hash {root}` prints it); otherwise restore the files.")
    return {
        "path": str(root), "sha256": actual, "hash": "manifest: sha256 of sorted '<path>\\t<sha256>\\n' lines",
        "files": {name: {"sha256": digest, "bytes": (root / name).stat().st_size}
                  for name, digest in manifest.items()},
    }


def write_verified(path: str, expected: str, out: str, keys: dict[str, str] | None = None) -> None:
    fileio.write_json(out, verify_base(path, expected, keys))
