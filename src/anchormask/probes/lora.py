"""LoRA weight allocation (probe 3 of docs/protocol.md, "Mechanism probes").

For every saved adapter, ``||ΔW||_F`` with ``ΔW = scaling · B A`` and ``scaling = lora_alpha / r``
(``lora_alpha / sqrt(r)`` for rsLoRA), per projection kind (q, k, v, o; names mapped through
``families.PROJECTIONS``) and layer, computed as ``scaling · sqrt(tr((BᵀB)(AAᵀ)))`` so that no
out x in matrix is formed. A kind's *share* is its part of the adapter's total squared
norm, ``Σ ||ΔW||²`` over its modules divided by the sum over all modules: squared
Frobenius norms add up over modules, norms do not.

The tables are written through ``tables.write_parquet``; the figure is drawn by
``reporting.probe_figures.lora_figure``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from anchormask import checksum, fileio
from anchormask.fileio import InputError
from anchormask.measurement import tables
from anchormask.model.adapters import verify as verify_adapter
from anchormask.model.families import KINDS, PROJECTIONS
from anchormask.repro import provenance

_str, _int, _f64 = pa.string(), pa.int64(), pa.float64()

LORA_LAYERS_SCHEMA = tables.arrow_schema([
    ("arm", _str, False), ("strategy", _str, False), ("targets", _str, False), ("adapter_id", _str, False),
    ("layer", _int, False), ("kind", _str, False), ("module", _str, False), ("rank", _int, False),
    ("scaling", _f64, False), ("fro_norm", _f64, False),
])
LORA_SCHEMA = tables.arrow_schema([
    ("arm", _str, False), ("strategy", _str, False), ("targets", _str, False), ("kind", _str, False),
    ("modules", _int, False), ("fro_norm", _f64, False), ("share", _f64, False), ("adapters", _int, False),
])

_LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<which>[AB])(?:\.[^.]+)?\.weight$")
_LAYER = re.compile(r"\.(\d+)\.")


def projection_kind(module: str, projections: Mapping[str, str] | None = None) -> str | None:
    """q, k, v or o for a module name (base.projections when given, else any family of
    ``families.PROJECTIONS``); None if none fits."""
    candidates = [projections] if projections else list(PROJECTIONS.values())
    pairs = sorted({(suffix, kind) for proj in candidates for kind, suffix in proj.items()},
                   key=lambda p: -len(p[0]))
    for suffix, kind in pairs:
        if module == suffix or module.endswith("." + suffix):
            return kind
    return None


def layer_index(module: str) -> int:
    """The first integer path component of a module name (``...layer.3.attention...`` -> 3); -1 if none."""
    m = _LAYER.search(f".{module}.")
    return int(m.group(1)) if m else -1


def lora_scaling(config: Mapping[str, Any]) -> float:
    r, alpha = config["r"], config["lora_alpha"]
    return alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r


def delta_fro_norm(a: np.ndarray, b: np.ndarray, scaling: float) -> float:
    """||scaling · B A||_F = scaling · sqrt(tr((BᵀB)(AAᵀ))) for A [r, in], B [out, r]."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or b.shape[1] != a.shape[0]:
        raise ValueError(f"lora_B {b.shape} @ lora_A {a.shape} is not a product")
    squared = float(np.sum((b.T @ b) * (a @ a.T)))
    return abs(scaling) * math.sqrt(max(squared, 0.0))


def adapter_norms(adapter_dir: str | Path, projections: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Rows (module, kind, layer, rank, scaling, fro_norm), one per LoRA-adapted module, sorted."""
    from safetensors.torch import load_file

    adapter_dir = Path(adapter_dir)
    weights_path, config_path = adapter_dir / "adapter_model.safetensors", adapter_dir / "adapter_config.json"
    for p in (weights_path, config_path):
        if not p.is_file():
            raise InputError(f"{adapter_dir}: adapter is missing {p.name}; rerun its training job")
    config = fileio.read_json(config_path)
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise InputError(f"{config_path}: rank_pattern / alpha_pattern are not supported by the LoRA probe")
    scaling = lora_scaling(config)
    pairs: dict[str, dict[str, Any]] = {}
    for key, tensor in load_file(str(weights_path)).items():
        m = _LORA_KEY.match(key)
        if m is None:
            continue
        module = m.group("module").removeprefix("base_model.model.")
        pairs.setdefault(module, {})[m.group("which")] = tensor.double().numpy()
    if not pairs:
        raise InputError(f"{weights_path}: no lora_A / lora_B tensors")
    rows = []
    for module in sorted(pairs):
        mats = pairs[module]
        if set(mats) != {"A", "B"}:
            raise InputError(f"{weights_path}: module {module} lacks lora_{'B' if 'A' in mats else 'A'}")
        if mats["A"].shape[0] != config["r"]:
            raise InputError(f"{weights_path}: module {module} has rank {mats['A'].shape[0]}, adapter_config.json "
                             f"says r = {config['r']}")
        kind = projection_kind(module, projections)
        if kind is None:
            raise InputError(f"{weights_path}: module {module} is not a Q/K/V/O projection of any known family")
        rows.append({"module": module, "kind": kind, "layer": layer_index(module), "rank": int(config["r"]),
                     "scaling": float(scaling), "fro_norm": delta_fro_norm(mats["A"], mats["B"], scaling)})
    return pd.DataFrame(rows, columns=["module", "kind", "layer", "rank", "scaling", "fro_norm"])


def lora_layers_table(adapters: Sequence[Mapping[str, Any]],
                      projections: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Per (arm, adapter, layer, kind). ``adapters``: dicts with arm, strategy, targets, path;
    ``projections``: base.projections of config.yaml, when set."""
    frames, meta = [], []
    for spec in adapters:
        path = Path(spec["path"])
        adapter_id = verify_adapter(path)["job"]["id"]  # an altered adapter is named, not measured
        norms = adapter_norms(path, projections)
        norms.insert(0, "adapter_id", adapter_id)
        for col in ("targets", "strategy", "arm"):
            norms.insert(0, col, spec[col])
        frames.append(norms)
        meta.append({"arm": spec["arm"], "path": str(path), "sha256": checksum.directory_sha256(path)})
    if not frames:
        raise InputError("LoRA probe: no adapters given")
    df = pd.concat(frames, ignore_index=True)
    df["_kind"] = df["kind"].map({k: i for i, k in enumerate(KINDS)})
    df = df.sort_values(["arm", "adapter_id", "layer", "_kind"], kind="mergesort").drop(columns="_kind")
    df = df.reset_index(drop=True)[LORA_LAYERS_SCHEMA.names]
    df.attrs["anchormask"] = {"table": "probe_lora_layers", "adapters": meta,
                              "definition": "fro_norm = ||(lora_alpha / r) * B @ A||_F per adapted module",
                              "versions": provenance.versions()}
    return df


def lora_share_table(layers_df: pd.DataFrame) -> pd.DataFrame:
    """Per (arm, kind): ||ΔW||_F over the kind's modules (sqrt of the summed squares) and its share of
    the adapter's total squared norm, each averaged over the arm's adapters (training seeds)."""
    d = layers_df.assign(sq=layers_df["fro_norm"].astype(float) ** 2)
    per = d.groupby(["arm", "strategy", "targets", "adapter_id", "kind"], sort=False).agg(
        sq=("sq", "sum"), modules=("module", "size")).reset_index()
    total = per.groupby("adapter_id")["sq"].transform("sum")
    per["share"] = np.where(total > 0, per["sq"] / total.where(total > 0, 1.0), np.nan)
    per["fro_norm"] = np.sqrt(per["sq"])
    out = per.groupby(["arm", "strategy", "targets", "kind"], sort=False).agg(
        modules=("modules", "first"), fro_norm=("fro_norm", "mean"), share=("share", "mean"),
        adapters=("adapter_id", "nunique")).reset_index()
    out["_kind"] = out["kind"].map({k: i for i, k in enumerate(KINDS)})
    out = out.sort_values(["arm", "_kind"], kind="mergesort").drop(columns="_kind").reset_index(drop=True)
    out = out[LORA_SCHEMA.names]
    out.attrs["anchormask"] = {"table": "probe_lora", "definition": (
        "fro_norm = sqrt(sum over the kind's modules of ||dW||_F^2); share = that sum / the adapter's total; "
        "both averaged over the arm's adapters"), "source": layers_df.attrs.get("anchormask", {})}
    return out
