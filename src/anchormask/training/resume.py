"""Continuing a LoRA training run where a shorter adapter of the same run stopped.

Why it is exact: the learning rate is a warm-up followed by a constant (``train.lr_at``, which does not
look at the run's length), and every draw of a step (the batch order, the mask ratio and positions, the
dropout) comes from generators seeded by the job's seed alone. So the first k steps of a run are the
same whatever its length: a 1,000-step run passes through the exact state in which the 300-step run of
the same strategy, targets, size and seed stops. A training job saves that state (``study.TRAIN_STATE``:
the LoRA weights, the optimizer's moments, both generators, the rest of the epoch's batch order and the
loss log), and a longer job of the same run continues from the longest shorter one the study trains
(``study.resumes_from``) instead of from step 0. The adapter it writes is the one a run from step 0
writes, byte for byte (tests/test_resume.py); the study's sweep trains 1,000 steps per run instead of
1,400.

The state is one safetensors file: tensors under ``lora/``, ``adam/``, ``rng/``; the rest (the run it
belongs to, the steps done, the pending batch order, the log rows) as canonical JSON in its metadata.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from anchormask import fileio
from anchormask.fileio import InputError

FORMAT = "anchormask-train-state/1"


def run_identity(job, settings: dict[str, Any], base_sha256: str | None, pair_ids: list[str]) -> dict[str, Any]:
    """What must be equal for one run to continue another: everything but the number of steps
    (and the log cadence, which changes no number)."""
    return {"strategy": job.strategy, "targets": job.targets, "size": job.size, "seed": job.seed,
            "settings": {k: v for k, v in sorted(settings.items()) if k != "log_every"},
            "base_sha256": base_sha256, "pairs": list(pair_ids)}


def save_state(path: str | Path, *, identity: dict[str, Any], params: dict[str, torch.Tensor],
               optimizer: torch.optim.Optimizer, generator: torch.Generator, pending: list[int],
               rows: list[tuple]) -> None:
    """Write the state after the steps ``rows`` log (one row a step), atomically. ``params``: the
    trainable tensors by name."""
    from safetensors.torch import save_file

    tensors = {f"lora/{name}": p.detach().cpu().contiguous() for name, p in params.items()}
    for index, moments in optimizer.state_dict()["state"].items():
        tensors |= {f"adam/{index}/{key}": torch.as_tensor(value).detach().cpu().contiguous()
                    for key, value in moments.items()}
    tensors |= {f"rng/{name}": state for name, state in _rng_states(generator).items()}
    # One metadata key: safetensors writes the metadata map in no fixed order, and the file must be
    # the same bytes from run to run.
    meta = {"format": FORMAT, "identity": identity, "pending": pending, "rows": [list(r) for r in rows]}
    with fileio.atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={"anchormask": fileio.canonical_json(meta)})


def restore(path: str | Path, *, identity: dict[str, Any], params: dict[str, torch.Tensor],
            optimizer: torch.optim.Optimizer, generator: torch.Generator) -> tuple[list[int], list[tuple]]:
    """Load a saved state into a freshly built run; returns (pending batch order, log rows: one per step done).

    Refuses a state of another run (any identity field differs) or of another format, naming the file.
    """
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get("anchormask", "{}"))
            tensors = {key: f.get_tensor(key) for key in f.keys()}
    except (OSError, ValueError, SafetensorError) as err:  # json's errors are ValueErrors
        raise InputError(f"{path}: not a readable training state ({err}); delete it and rerun the job "
                         "that writes it") from None
    _check_matches(path, meta, identity)
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(_tensor(path, tensors, f"lora/{name}").to(p.device, p.dtype))
    _load_optimizer(path, optimizer, tensors)
    _set_rng_states(generator, tensors)
    return meta["pending"], [tuple(r) for r in meta["rows"]]


def _check_matches(path: Path, meta: dict[str, Any], identity: dict[str, Any]) -> None:
    if meta.get("format") != FORMAT:
        raise InputError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}; delete it and rerun the "
                         "job that writes it")
    saved = meta["identity"]
    differ = sorted(k for k in identity.keys() | saved.keys() if saved.get(k) != identity.get(k))
    if differ:
        raise InputError(f"{path}: the state is of another run ({', '.join(differ)} differ: "
                         f"{ {k: saved.get(k) for k in differ} } against { {k: identity.get(k) for k in differ} }); "
                         "a run continues only its own shorter run. Delete the file and rerun the job that writes it")


def _tensor(path: Path, tensors: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    if key not in tensors:
        raise InputError(f"{path}: no tensor {key!r}; the state does not match this model's LoRA layout. "
                         "Delete it and rerun the job that writes it")
    return tensors[key]


def _load_optimizer(path: Path, optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("adam/"):
            _, index, name = key.split("/")
            state.setdefault(int(index), {})[name] = value
    saved = optimizer.state_dict()
    if sorted(state) != sorted(range(len(saved["param_groups"][0]["params"]))):
        raise InputError(f"{path}: optimizer state for {len(state)} tensors, this run trains "
                         f"{len(saved['param_groups'][0]['params'])}; delete it and rerun the job that writes it")
    optimizer.load_state_dict({"state": state, "param_groups": saved["param_groups"]})


def _rng_states(generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The batch/mask generator's state and the global ones dropout draws from (CUDA's where it is used)."""
    states = {"generator": generator.get_state(), "cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def _set_rng_states(generator: torch.Generator, tensors: dict[str, torch.Tensor]) -> None:
    generator.set_state(tensors["rng/generator"])
    torch.set_rng_state(tensors["rng/cpu"])
    if "rng/cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng/cuda"])
