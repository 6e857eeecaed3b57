"""Mechanism probes (PROTOCOL "Mechanism probes" and the seed-002 option).

* **Attention mass** (probe 2). Each arm (the base, and the base with one adapter merged)
  answers every retrieved query with the anchor locked, through ``sampler.generate``; before
  every denoising forward pass an observer runs the same input once more with
  ``output_attentions=True`` (the model loaded with ``attn_implementation="eager"``) or, for
  families whose code refuses that (LLaDA, Dream), while recording torch's
  scaled_dot_product_attention, and measures, per layer and head, the attention probability that flows from the generated
  answer positions onto (a) the question prefix and (b) the locked anchor.

  Our reading of the aggregation: for one query at one step, the *mass onto X* of a head is
  the mean over the query's generated-answer positions (every slot position after the
  locked anchor, decided or still masked) of the summed attention probability onto the
  positions of X. A query's value is the mean of that over the denoising steps in which the
  query still had a masked position (the steps its ``forward_passes`` counts); the arm's
  value is the mean over queries (and over the arm's adapters, one per training seed).
  The *prefix* is positions [0, slot_start): the question with its [CLS] and [SEP] (which
  BERT-style models use as attention sinks, so part of the prefix mass is sink mass); padding
  gets no probability. The *anchor* is [slot_start, slot_start + locked). The rest of each
  row's mass goes to the answer slot itself and any extra masks.

* **LoRA weight allocation** (probe 3). For every saved adapter,
  ``||ΔW||_F`` with ``ΔW = scaling · B A`` and ``scaling = lora_alpha / r``
  (``lora_alpha / sqrt(r)`` for rsLoRA), per projection kind (q, k, v, o; names mapped through
  ``families.PROJECTIONS``) and layer, computed as ``scaling · sqrt(tr((BᵀB)(AAᵀ)))`` so that no
  out x in matrix is formed. A kind's *share* is its part of the adapter's total squared
  norm, ``Σ ||ΔW||²`` over its modules divided by the sum over all modules: squared
  Frobenius norms add up over modules, norms do not.

* **Mask-count robustness** (seed 002). Generations with ``generation.extra_masks = k``
  (k masks appended after the answer slot that stay masked) are scored like the main ones
  (``tables.generations_table``); per arm, k and query set, the mean corpus_overlap with a
  percentile bootstrap CI, and the paired difference from the smallest k with its CI and
  P(mean_k < mean_k0). Within one query set every (arm, k) uses the same resampled queries.

* ``summary_markdown`` gathers each probe's headline number, with the reverse vs random
  comparison (probe 1) and the V/O ablation (probe 4) taken from the comparison statistics.

Tables are written through ``tables.write_parquet`` (explicit schema, canonical-JSON
provenance) and figures through ``figures.save``: the same inputs give the same bytes. Heavy
imports (torch, the model code, matplotlib) happen inside the functions that need them, so
each rule's ``code`` digest names only the modules its job really runs.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from anchormask import io, provenance, tables
from anchormask.io import InputError

TARGETS = ("prefix", "anchor")
KINDS = ("q", "k", "v", "o")
SPLITS = ("held_out", "in_domain", "all")

_str, _int, _f64 = pa.string(), pa.int64(), pa.float64()


ATTENTION_SCHEMA = tables.arrow_schema([
    ("arm", _str, False), ("strategy", _str, True), ("targets", _str, True), ("layer", _int, False),
    ("head", _int, False), ("target", _str, False), ("mass", _f64, False), ("queries", _int, False),
    ("adapters", _int, False),
])
LORA_LAYERS_SCHEMA = tables.arrow_schema([
    ("arm", _str, False), ("strategy", _str, False), ("targets", _str, False), ("adapter_id", _str, False),
    ("layer", _int, False), ("kind", _str, False), ("module", _str, False), ("rank", _int, False),
    ("scaling", _f64, False), ("fro_norm", _f64, False),
])
LORA_SCHEMA = tables.arrow_schema([
    ("arm", _str, False), ("strategy", _str, False), ("targets", _str, False), ("kind", _str, False),
    ("modules", _int, False), ("fro_norm", _f64, False), ("share", _f64, False), ("adapters", _int, False),
])
MASKCOUNT_SCHEMA = tables.arrow_schema([
    ("arm", _str, False), ("k", _int, False), ("split", _str, False), ("n", _int, False), ("mean", _f64, False),
    ("lo", _f64, False), ("hi", _f64, False), ("k0", _int, False), ("diff", _f64, False), ("diff_lo", _f64, False),
    ("diff_hi", _f64, False), ("p_below_k0", _f64, False), ("empty_fraction", _f64, False),
    ("mean_word_tokens", _f64, False), ("resamples", _int, False), ("confidence", _f64, False),
    ("seed", _int, False),
])

ATTENTION_DEFINITION = (
    "mass onto X = mean over queries (and adapters) of the mean over denoising steps (those with a masked "
    "slot position left) of the mean over generated-answer positions (slot positions after the locked "
    "anchor) of the summed attention probability onto X; prefix = positions [0, slot_start) ([CLS] and "
    "[SEP] included), anchor = the locked anchor positions [slot_start, slot_start + locked)")


def _base_arm(arms: Sequence[str], strategies: Mapping[str, Any]) -> str | None:
    base = [a for a in arms if strategies.get(a) is None]
    return base[0] if base else None


def _null(x: Any) -> bool:
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


# --------------------------------------------------------------------------- attention mass

def attention_mass_rows(attentions: Sequence[Any], answer_mask: Any, prefix_mask: Any, anchor_mask: Any) -> np.ndarray:
    """[batch, layers, heads, 2] (prefix, anchor): per row, the mean over its answer positions of the
    summed attention probability onto its prefix / anchor positions.

    ``attentions``: one [batch, heads, seq, seq] array per layer (query positions on axis 2, key
    positions on axis 3, rows summing to 1); the masks are boolean [batch, seq]. Rows without
    answer positions give NaN.
    """
    import torch

    answer = torch.as_tensor(answer_mask).bool()
    onto = torch.stack([torch.as_tensor(prefix_mask).bool(), torch.as_tensor(anchor_mask).bool()], -1)
    if answer.ndim != 2 or onto.shape[:2] != answer.shape:
        raise ValueError(f"masks must be [batch, seq] of one shape, got {tuple(answer.shape)} and "
                         f"{tuple(onto.shape[:2])}")
    out = []
    for i, layer in enumerate(attentions):
        att = torch.as_tensor(layer)
        if att.ndim != 4 or att.shape[0] != answer.shape[0] or att.shape[2:] != (answer.shape[1],) * 2:
            raise ValueError(f"layer {i}: attention must be [batch, heads, {answer.shape[1]}, {answer.shape[1]}] "
                             f"for batch {answer.shape[0]}, got {tuple(att.shape)}")
        att = att.double()
        weights = answer.to(att.device, torch.float64)
        summed = torch.einsum("bhqk,bkt->bhqt", att, onto.to(att.device, torch.float64))
        out.append(torch.einsum("bhqt,bq->bht", summed, weights) / weights.sum(1)[:, None, None])
    if not out:
        raise ValueError("no attention layers given")
    return torch.stack(out, 1).cpu().numpy()


def attention_mass(attentions: Sequence[Any], answer_mask: Any, prefix_mask: Any, anchor_mask: Any) -> np.ndarray:
    """[layers, heads, 2]: ``attention_mass_rows`` averaged over the rows that have answer positions."""
    import torch

    rows = attention_mass_rows(attentions, answer_mask, prefix_mask, anchor_mask)
    valid = torch.as_tensor(answer_mask).bool().any(1).cpu().numpy()
    if not valid.any():
        raise ValueError("no row has an answer position")
    return rows[valid].mean(0)


def observation_masks(obs):
    """(answer, prefix, anchor) boolean [batch, seq] masks of one ``sampler.Observation``:
    answer = [slot_start + locked, slot_start + answer_len), prefix = [0, slot_start) (real tokens),
    anchor = [slot_start, slot_start + locked)."""
    import torch

    width = obs.input_ids.shape[1]
    pos = torch.arange(width)[None, :]
    start = obs.slot_start[:, None].to(torch.long).cpu()
    lock_end = start + obs.locked[:, None].to(torch.long).cpu()
    prefix = (pos < start) & obs.attention_mask.bool().cpu()
    anchor = (pos >= start) & (pos < lock_end)
    answer = (pos >= lock_end) & (pos < start + obs.answer_len)
    return answer, prefix, anchor


class AttentionUnavailable(RuntimeError):
    """The model exposes no attention probabilities (neither output_attentions nor torch's SDPA)."""


def sdpa_probabilities(query, key, attn_mask=None, is_causal=False, scale=None, **_):
    """The attention probabilities that torch's scaled_dot_product_attention applies, in float32."""
    import torch

    if key.shape[-3] != query.shape[-3]:  # grouped-query attention: each K head serves several Q heads
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], dim=-3)
    scale = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    scores = (query.float() @ key.float().transpose(-2, -1)) * scale
    if is_causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).triu(1),
                                    float("-inf"))
    if attn_mask is not None:
        scores = (scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                  else scores + attn_mask.float())
    return torch.softmax(scores, dim=-1)


@contextlib.contextmanager
def recorded_sdpa():
    """Record the probabilities of every torch.nn.functional.scaled_dot_product_attention call, in call
    order (one per layer), for model code that cannot return them (LLaDA refuses output_attentions).
    The model's own call runs unchanged, so its outputs are not affected."""
    import torch.nn.functional as F

    original, seen = F.scaled_dot_product_attention, []

    def recording(query, key, value, *args, **kwargs):
        named = dict(zip(("attn_mask", "dropout_p", "is_causal", "scale"), args)) | kwargs
        seen.append(sdpa_probabilities(query, key, **{k: v for k, v in named.items() if k != "dropout_p"}))
        return original(query, key, value, *args, **kwargs)

    F.scaled_dot_product_attention = recording
    try:
        yield seen
    finally:
        F.scaled_dot_product_attention = original


def attention_forward(backbone, input_ids, attention_mask):
    """The per-layer attention probabilities of one forward pass (the head swapped out: the probe
    needs no logits): from ``output_attentions`` or, for families that cannot return them, from
    recording torch's SDPA."""
    if backbone.family.attentions == "sdpa":
        with recorded_sdpa() as seen:
            backbone.hidden_states(input_ids, attention_mask)
        if not seen:
            raise AttentionUnavailable(f"{backbone.path}: the {backbone.family.name} model computed attention "
                                       "without torch's scaled_dot_product_attention; its probabilities cannot "
                                       "be recorded")
        return seen
    _, out = backbone.hidden_states(input_ids, attention_mask, output_attentions=True)
    attentions = getattr(out, "attentions", None)
    if not attentions or any(a is None for a in attentions):
        raise AttentionUnavailable(f"{backbone.path}: the model returned no attention probabilities; load it "
                                   "with attn_implementation='eager' (SDPA and flash attention do not expose them)")
    return attentions


def attention_probe(backbone, runtime, requests, settings) -> dict[str, np.ndarray]:
    """Query id -> [layers, heads, 2] mass (prefix, anchor), averaged over its denoising steps."""
    from anchormask import sampler

    sums: dict[str, np.ndarray] = {}
    steps: dict[str, int] = {}
    device = runtime.device

    def observe(obs) -> None:
        answer, prefix, anchor = observation_masks(obs)
        with runtime.autocast():
            attentions = attention_forward(backbone, obs.input_ids.to(device), obs.attention_mask.to(device))
        rows = attention_mass_rows(attentions, answer, prefix, anchor)
        active = obs.masked.any(1).tolist()
        for b, qid in enumerate(obs.query_ids):
            if active[b]:
                sums[qid] = sums.get(qid, 0.0) + rows[b]
                steps[qid] = steps.get(qid, 0) + 1

    sampler.generate(backbone, runtime, requests, settings, observer=observe)
    return {qid: sums[qid] / steps[qid] for qid in sums}


def attention_table(arms: Sequence[Mapping[str, Any]], retrieval_files: Sequence[str], base: Mapping[str, Any],
                    settings, threads: int = 1) -> pd.DataFrame:
    """One row per (arm, layer, head, target). ``arms``: dicts with arm, strategy, targets, adapters."""
    import torch

    from anchormask import backbone as bb
    from anchormask import checksum, generation

    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    runtime = bb.pick_runtime(base.get("device", "auto"))
    retrieved = [rec for path in retrieval_files for rec in io.read_jsonl(path)]
    if not retrieved:
        raise InputError("attention probe: the retrieval files hold no queries")
    rows, adapters_meta, unavailable = [], {}, {}
    remote = base.get("trust_remote_code", False)
    for spec in arms:
        per_adapter = []
        for adapter in spec["adapters"] or [None]:
            # Eager attention returns probabilities; remote code keeps its own SDPA, which the probe records.
            backbone = generation.load_adapted(base["path"], adapter, trust_remote_code=remote, runtime=runtime,
                                               attn_implementation=None if remote else "eager",
                                               family=base.get("family"), projections=base.get("projections"))
            requests = generation.requests_for(backbone, retrieved)
            try:
                per_query = attention_probe(backbone, runtime, requests, settings)
            except AttentionUnavailable as err:
                unavailable[spec["arm"]] = str(err)
                break
            missing = [r.query_id for r in requests if r.query_id not in per_query]
            if missing:
                raise RuntimeError(f"attention probe, arm {spec['arm']}: no observation for queries {missing[:5]}")
            per_adapter.append(np.mean([per_query[r.query_id] for r in requests], axis=0))
            if adapter is not None:
                adapters_meta[adapter] = checksum.directory_sha256(adapter)
        if spec["arm"] in unavailable:
            continue
        mass = np.mean(per_adapter, axis=0)  # [layers, heads, 2]
        for layer in range(mass.shape[0]):
            for head in range(mass.shape[1]):
                for t, target in enumerate(TARGETS):
                    rows.append({"arm": spec["arm"], "strategy": spec.get("strategy"), "targets": spec.get("targets"),
                                 "layer": layer, "head": head, "target": target, "mass": float(mass[layer, head, t]),
                                 "queries": len(retrieved), "adapters": len(spec["adapters"])})
    df = pd.DataFrame(rows, columns=ATTENTION_SCHEMA.names)
    df.attrs["anchormask"] = {
        "table": "probe_attention", "definition": ATTENTION_DEFINITION,
        "inputs": [tables.file_entry(p) for p in retrieval_files], "adapters": adapters_meta,
        "base": {"path": base["path"], "sha256": base.get("sha256")}, "sampler": settings.record(),
        "seed": settings.seed, "runtime": runtime.name, "versions": provenance.versions(),
    }
    if unavailable:  # a statement in the output, not a crash that stops the `all` target
        df.attrs["anchormask"]["not_available"] = unavailable
    return df


def attention_figure(df: pd.DataFrame, pdf_path, png_path) -> None:
    """Layer x head heatmaps: per target a row of absolute masses per arm and a row of arm minus base."""
    import matplotlib
    from matplotlib.figure import Figure

    from anchormask import figures

    if df.empty:
        _unavailable_figure(df, pdf_path, png_path)
        return
    arms = figures.order_arms(list(df["arm"].unique()))
    strategies = df.groupby("arm")["strategy"].first().to_dict()
    base = _base_arm(arms, {a: None if _null(s) else s for a, s in strategies.items()})
    layers, heads = int(df["layer"].max()) + 1, int(df["head"].max()) + 1
    grid = {(a, t): _matrix(df, a, t, layers, heads) for a in arms for t in TARGETS}
    others = [a for a in arms if a != base]
    row_specs = []
    for target in TARGETS:
        row_specs.append((target, False))
        if base is not None and others:
            row_specs.append((target, True))
    annotate = layers * heads <= 64
    with matplotlib.rc_context(figures.RC):
        fig = Figure(figsize=(1.2 + 1.75 * len(arms), 0.6 + 1.9 * len(row_specs)), layout="constrained")
        axes = fig.subplots(len(row_specs), len(arms), squeeze=False)
        for r, (target, diff) in enumerate(row_specs):
            mats = {a: grid[(a, target)] - grid[(base, target)] if diff else grid[(a, target)]
                    for a in (others if diff else arms)}
            top = max(float(np.nanmax(np.abs(m))) for m in mats.values()) or 1e-12
            norm = dict(vmin=-top, vmax=top, cmap="RdBu_r") if diff else dict(vmin=0.0, vmax=top, cmap="viridis")
            image = None
            for c, arm in enumerate(arms):
                ax = axes[r, c]
                if arm not in mats:
                    ax.set_visible(False)
                    continue
                m = mats[arm]
                image = ax.imshow(m, aspect="auto", interpolation="nearest", **norm)
                if annotate:
                    for (i, j), v in np.ndenumerate(m):
                        shade = abs(v) / top if diff else v / top
                        colour = ("white" if shade > 0.6 else "black") if diff else ("black" if shade > 0.6 else "white")
                        ax.text(j, i, f"{v:+.3f}" if diff else f"{v:.2f}", ha="center", va="center",
                                fontsize=5.5 if diff else 6, color=colour)
                ax.set_xticks(range(heads))
                ax.set_yticks(range(layers))
                ax.set_title(f"{arm} − {base}" if diff else arm, fontsize=8)
                if c == 0 or (diff and c == 1 and arms[0] == base):
                    ax.set_ylabel(f"{target}{' Δ' if diff else ''}\nlayer")
                if r == len(row_specs) - 1:
                    ax.set_xlabel("head")
            if image is not None:
                fig.colorbar(image, ax=list(axes[r, :]), shrink=0.85, pad=0.01,
                             label="Δ mass" if diff else "mass")
        fig.suptitle("Attention mass from generated-answer positions onto the question prefix and the locked "
                     "anchor (mean over answer positions, steps, queries)")
        figures.save(fig, pdf_path, png_path)


def _unavailable_figure(df: pd.DataFrame, pdf_path, png_path) -> None:
    """A figure that says why there is no heatmap (the model exposes no attention probabilities)."""
    import matplotlib
    from matplotlib.figure import Figure

    from anchormask import figures

    reasons = (df.attrs.get("anchormask") or {}).get("not_available") or {"all arms": "no attention rows"}
    with matplotlib.rc_context(figures.RC):
        fig = Figure(figsize=(7, 1.5 + 0.4 * len(reasons)), layout="constrained")
        fig.text(0.02, 0.5, "Attention probe not available for this model:\n" + "\n".join(
            f"{arm}: {why}" for arm, why in reasons.items()), va="center", fontsize=7, wrap=True)
        figures.save(fig, pdf_path, png_path)


def _matrix(df: pd.DataFrame, arm: str, target: str, layers: int, heads: int) -> np.ndarray:
    part = df[(df["arm"] == arm) & (df["target"] == target)]
    m = np.full((layers, heads), np.nan)
    m[part["layer"].to_numpy(int), part["head"].to_numpy(int)] = part["mass"].to_numpy(float)
    return m


# --------------------------------------------------------------------------- LoRA weight allocation

_LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<which>[AB])(?:\.[^.]+)?\.weight$")
_LAYER = re.compile(r"\.(\d+)\.")


def projection_kind(module: str, projections: Mapping[str, str] | None = None) -> str | None:
    """q, k, v or o for a module name (base.projections when given, else any family of
    ``families.PROJECTIONS``); None if none fits."""
    from anchormask.families import PROJECTIONS

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
    config = io.read_json(config_path)
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
    from anchormask import checksum
    from anchormask.adapters import verify as verify_adapter

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


_KIND_COLOURS = {"q": "#1f77b4", "k": "#ff7f0e", "v": "#2ca02c", "o": "#d62728"}


def lora_figure(layers_df: pd.DataFrame, pdf_path, png_path) -> None:
    """(a) share of ||ΔW||² per kind, per arm; (b) ||ΔW||_F per kind, per arm; (c) per layer, full arms."""
    import matplotlib
    from matplotlib.figure import Figure

    from anchormask import figures

    share = lora_share_table(layers_df)
    arms = figures.order_arms(list(share["arm"].unique()))
    x = np.arange(len(arms))
    with matplotlib.rc_context(figures.RC):
        fig = Figure(figsize=(13.0, 3.8), layout="constrained")
        ax_share, ax_norm, ax_layer = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.1, 1.1, 1.0]})
        bottom = np.zeros(len(arms))
        width = 0.8 / len(KINDS)
        for j, kind in enumerate(KINDS):
            part = share[share["kind"] == kind].set_index("arm").reindex(arms)
            vals = part["share"].fillna(0.0).to_numpy(float)
            ax_share.bar(x, vals, 0.7, bottom=bottom, color=_KIND_COLOURS[kind], edgecolor="black", linewidth=0.3,
                         label=kind.upper())
            bottom += vals
            ax_norm.bar(x + (j - 1.5) * width, part["fro_norm"].fillna(0.0).to_numpy(float), width,
                        color=_KIND_COLOURS[kind], edgecolor="black", linewidth=0.3, label=kind.upper())
        for ax in (ax_share, ax_norm):
            ax.set_xticks(x, arms, rotation=45, ha="right")
            ax.grid(axis="y", linewidth=0.3, alpha=0.6)
        ax_share.set_ylim(0, 1)
        ax_share.set_ylabel("share of Σ‖ΔW‖²_F")
        ax_share.set_title("(a) where the update goes")
        ax_share.legend(loc="upper right", frameon=False, fontsize=7, ncols=4)
        ax_norm.set_ylabel("‖ΔW‖_F over the kind's layers")
        ax_norm.set_title("(b) update size per projection kind")
        styles = ("-", "--", ":", "-.")
        full = [a for a in arms if (share.loc[share["arm"] == a, "targets"] == "full").any()]
        for i, arm in enumerate(full):
            part = layers_df[layers_df["arm"] == arm]
            for kind in KINDS:
                sel = part[part["kind"] == kind]
                if sel.empty:
                    continue
                by_layer = (sel.assign(sq=sel["fro_norm"] ** 2).groupby("layer")["sq"].sum()
                            / max(1, sel["adapter_id"].nunique())) ** 0.5
                ax_layer.plot(by_layer.index, by_layer.to_numpy(), styles[i % len(styles)], marker="o", markersize=3,
                              color=_KIND_COLOURS[kind], label=f"{arm} {kind.upper()}")
        ax_layer.set_xticks(sorted(int(v) for v in layers_df["layer"].unique()))
        ax_layer.set_xlabel("layer")
        ax_layer.set_ylabel("‖ΔW‖_F")
        ax_layer.set_title("(c) per layer, full-target arms (line style = arm)")
        ax_layer.grid(linewidth=0.3, alpha=0.6)
        if full:
            ax_layer.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=6)
        fig.suptitle("LoRA weight allocation: ‖(α/r)·B A‖_F per projection kind and layer")
        figures.save(fig, pdf_path, png_path)


# --------------------------------------------------------------------------- mask-count robustness

def maskcount_generations(files: Sequence[tuple[str, int, str]], corpora: Mapping[str, str]) -> pd.DataFrame:
    """Scored generations of (arm, k, path) files, with a ``k`` column; checks each file's arm and k."""
    frames = []
    for arm, k, path in files:
        for lineno, rec in enumerate(io.read_jsonl(path), start=1):
            if rec.get("arm") != arm or rec.get("sampler", {}).get("extra_masks") != int(k):
                raise InputError(f"{path}: line {lineno}: expected arm {arm!r} with sampler.extra_masks = {k}, "
                                 f"found {rec.get('arm')!r} with {rec.get('sampler', {}).get('extra_masks')!r}; "
                                 "regenerate it")
        # k = generation.extra_masks reuses the arm's main generations, which also hold the second query set
        df = tables.of_query_set(tables.generations_table([path], corpora))
        frames.append(df.assign(k=int(k)))
    if not frames:
        raise InputError("mask-count probe: no generation files given")
    return pd.concat(frames, ignore_index=True)


def maskcount_summary(df: pd.DataFrame, resamples: int, confidence: float, seed: int) -> pd.DataFrame:
    """Per (arm, k, split): mean corpus_overlap [CI] and the paired difference from the smallest k."""
    from anchormask import bootstrap

    ks = sorted(int(k) for k in df["k"].unique())
    k0 = ks[0]
    rows = []
    selections = [("held_out", df["split"] == "held_out"), ("in_domain", df["split"] == "in_domain"),
                  ("all", pd.Series(True, index=df.index))]
    for split, mask in selections:
        sel = df[mask]
        if sel.empty:
            continue
        for arm in sorted(sel["arm"].unique()):
            part = sel[sel["arm"] == arm]
            values, meta = [], []
            for k in ks:
                at = part[part["k"] == k]
                if at.empty:
                    raise InputError(f"mask-count probe: arm {arm!r} has no generations at k = {k}")
                pq = bootstrap.per_query(at).set_index("query_id").sort_index()
                values.append(pq["overlap"])
                meta.append((float(at["empty"].mean()), float(at["word_tokens"].astype(float).mean())))
            qids = list(values[0].index)
            if any(list(v.index) != qids for v in values):
                raise InputError(f"mask-count probe: arm {arm!r} covers different queries at different k")
            x = np.stack([v.to_numpy(float) for v in values])  # [k, n]
            counts = bootstrap.resample_counts(len(qids), resamples, bootstrap.query_set_rng(seed, qids))
            means = x @ counts.T / len(qids)  # [k, R]
            lo, hi = bootstrap.percentile_interval(means, confidence)
            diffs = means - means[0]
            dlo, dhi = bootstrap.percentile_interval(diffs, confidence)
            for i, k in enumerate(ks):
                rows.append({"arm": arm, "k": k, "split": split, "n": len(qids), "mean": float(x[i].mean()),
                             "lo": float(lo[i]), "hi": float(hi[i]), "k0": k0, "diff": float(x[i].mean() - x[0].mean()),
                             "diff_lo": float(dlo[i]), "diff_hi": float(dhi[i]),
                             "p_below_k0": float((diffs[i] < 0).mean()), "empty_fraction": meta[i][0],
                             "mean_word_tokens": meta[i][1], "resamples": int(resamples),
                             "confidence": float(confidence), "seed": int(seed)})
    out = pd.DataFrame(rows, columns=MASKCOUNT_SCHEMA.names)
    return out


def maskcount_markdown(summary: pd.DataFrame) -> str:
    k0 = int(summary["k0"].iloc[0]) if len(summary) else 0
    conf = float(summary["confidence"].iloc[0]) if len(summary) else 0.95
    lines = ["# Mask-count robustness (seed 002)", "",
             f"Mean corpus_overlap of the post-anchor text with k extra [MASK] tokens appended after the answer "
             f"slot (they stay masked). {100 * conf:g}% percentile bootstrap CIs over queries; Δ is the paired "
             f"difference from k = {k0}, P(Δ<0) the fraction of resamples in which the mean fell below k = {k0}.",
             ""]
    for split, title in (("held_out", "Held-out queries, pooled"), ("in_domain", "In-domain queries"),
                         ("all", "All queries")):
        part = summary[summary["split"] == split]
        if part.empty:
            continue
        lines += [f"## {title}", "", "| arm | k | N | mean [CI] | Δ vs k=%d [CI] | P(Δ<0) | empty |" % k0,
                  "|---|---:|---:|---|---|---:|---:|"]
        for r in part.to_dict("records"):
            lines.append(f"| {r['arm']} | {r['k']} | {r['n']} | {r['mean']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] | "
                         f"{r['diff']:+.3f} [{r['diff_lo']:+.3f}, {r['diff_hi']:+.3f}] | {r['p_below_k0']:.3f} | "
                         f"{r['empty_fraction']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def maskcount_figure(summary: pd.DataFrame, pdf_path, png_path) -> None:
    """Mean corpus_overlap against k, one line (and CI band) per arm; held-out and in-domain panels."""
    import matplotlib
    from matplotlib.figure import Figure

    from anchormask import figures

    splits = [s for s in ("held_out", "in_domain") if (summary["split"] == s).any()] or ["all"]
    top = max(0.05, float(summary["hi"].max()) * 1.15) if len(summary) else 1.0
    arms = figures.order_arms(list(summary["arm"].unique()))
    colours = {a: figures._COLOURS[figures.ARM_ORDER.index(a) if a in figures.ARM_ORDER else 8 + i % 2]
               for i, a in enumerate(arms)}
    with matplotlib.rc_context(figures.RC):
        fig = Figure(figsize=(3.6 * (len(splits) + 1) + 0.4, 3.3), layout="constrained")
        axes = fig.subplots(1, len(splits) + 1, squeeze=False)[0]
        for ax, split in zip(axes, splits):
            ax.set_ylim(0, min(1.0, top))
            part = summary[summary["split"] == split]
            for arm in arms:
                line = part[part["arm"] == arm].sort_values("k")
                if line.empty:
                    continue
                ks = line["k"].to_numpy(float)
                ax.fill_between(ks, line["lo"].to_numpy(float), line["hi"].to_numpy(float), color=colours[arm],
                                alpha=0.15, linewidth=0)
                ax.plot(ks, line["mean"].to_numpy(float), marker="o", markersize=3.5, color=colours[arm], label=arm)
            n = int(part["n"].max()) if len(part) else 0
            ax.set_title({"held_out": "held-out pooled", "in_domain": "in-domain", "all": "all queries"}[split]
                         + f" (N = {n})")
            ax.set_xticks(sorted(int(k) for k in part["k"].unique()))
            ax.set_xlabel("extra [MASK] tokens k")
            ax.grid(linewidth=0.3, alpha=0.6)
        empty_ax = axes[-1]
        part = summary[summary["split"] == splits[0]]
        for arm in arms:
            line = part[part["arm"] == arm].sort_values("k")
            empty_ax.plot(line["k"].to_numpy(float), line["empty_fraction"].to_numpy(float), marker="o",
                          markersize=3.5, color=colours[arm], label=arm)
        empty_ax.set_ylim(-0.02, 1.02)
        empty_ax.set_xticks(sorted(int(k) for k in part["k"].unique()))
        empty_ax.set_xlabel("extra [MASK] tokens k")
        empty_ax.set_ylabel("fraction of empty continuations")
        empty_ax.set_title(f"empty post-anchor text ({splits[0].replace('_', '-')})")
        empty_ax.grid(linewidth=0.3, alpha=0.6)
        axes[0].set_ylabel("mean corpus_overlap")
        axes[-1].legend(loc="best", frameon=False)
        conf = float(summary["confidence"].iloc[0]) if len(summary) else 0.95
        fig.suptitle(f"Mask-count robustness ({100 * conf:g}% bootstrap CI bands)")
        figures.save(fig, pdf_path, png_path)


# --------------------------------------------------------------------------- summary

def _comparison_line(row: Mapping[str, Any]) -> str:
    point = tables.number(row["ratio"], ".2f")
    ratio = f"{point}{'' if point == 'n/a' else 'x'} [{tables.number(row['ratio_lo'], '.2f')}, {tables.number(row['ratio_hi'], '.2f')}]"
    report = "" if _null(row.get("report")) else f"; report: {row['report']}"
    return (f"`{row['name']}` ({row['selector']}, N = {int(row['n'])}): {row['a']} {tables.number(row['mean_a'])} vs "
            f"{row['b']} {tables.number(row['mean_b'])}, diff {tables.number(row['diff'], '+.3f')} [{tables.number(row['diff_lo'], '+.3f')}, "
            f"{tables.number(row['diff_hi'], '+.3f')}], ratio {ratio}, P(a>b) = {tables.number(row['p_a_gt_b'])}{report}")


def headline_lines(by_name: Mapping[str, Mapping[str, Any]], attention: pd.DataFrame | None,
                   lora: pd.DataFrame | None, maskcount: pd.DataFrame | None, paths: Mapping[str, str]) -> list[str]:
    """One bullet per probe (1 reverse vs random, 2 attention, 3 LoRA, 4 V/O ablation, 5 mask count)."""
    comp_path = paths["comparisons"]
    out = []
    row = by_name.get("heldout_reverse_vs_random")
    out.append("- **1. reverse vs random**: " + (
        f"held-out diff {tables.number(row['diff'], '+.3f')} [{tables.number(row['diff_lo'], '+.3f')}, {tables.number(row['diff_hi'], '+.3f')}], "
        f"P(reverse > random) = {tables.number(row['p_a_gt_b'])} (N = {int(row['n'])}); row `heldout_reverse_vs_random` of "
        f"`{comp_path}`" if row is not None else f"not configured (no `heldout_reverse_vs_random` in `{comp_path}`)"))
    if attention is not None and len(attention):
        means = attention.groupby(["arm", "target"])["mass"].mean().unstack("target")
        strategies = attention.groupby("arm")["strategy"].first().to_dict()
        base = _base_arm(list(means.index), {a: None if _null(s) else s for a, s in strategies.items()})
        parts = [f"{a} {means.loc[a, 'anchor']:.3f}" + (f" ({means.loc[a, 'anchor'] - means.loc[base, 'anchor']:+.4f})"
                                                       if base and a != base else "")
                 for a in means.index if a in ("base", "anchor", "random") or a == base]
        out.append("- **2. attention**: mass onto the locked anchor, mean over layers and heads (Δ vs "
                   f"{base or 'base'}): " + ", ".join(parts) + f"; `{paths['attention_figure']}`")
    else:
        out.append("- **2. attention**: not run")
    if lora is not None and len(lora):
        full = lora[lora["targets"] == "full"]
        vo = full[full["kind"].isin(["v", "o"])].groupby("arm")["share"].sum()
        out.append("- **3. LoRA allocation**: V+O share of Σ‖ΔW‖² in the full-target adapters: "
                   + ", ".join(f"{a} {v:.3f}" for a, v in vo.items()) + f"; `{paths['lora_figure']}`")
    else:
        out.append("- **3. LoRA allocation**: not run")
    vo_row = by_name.get("heldout_anchorvo_vs_anchor")
    out.append("- **4. V/O ablation**: " + (
        f"held-out anchor-vo {tables.number(vo_row['mean_a'])} vs anchor (full) {tables.number(vo_row['mean_b'])}, diff "
        f"{tables.number(vo_row['diff'], '+.3f')} [{tables.number(vo_row['diff_lo'], '+.3f')}, {tables.number(vo_row['diff_hi'], '+.3f')}]; "
        if vo_row is not None else "") + f"see `{paths['ablation']}`")
    if maskcount is not None and len(maskcount):
        split = "held_out" if (maskcount["split"] == "held_out").any() else "all"
        part = maskcount[maskcount["split"] == split]
        kmax = int(part["k"].max())
        top = part[part["k"] == kmax]
        out.append(f"- **5. mask count**: {split.replace('_', '-')} Δ mean corpus_overlap from k = "
                   f"{int(part['k0'].iloc[0])} to k = {kmax}: "
                   + ", ".join(f"{r['arm']} {r['diff']:+.3f} [{r['diff_lo']:+.3f}, {r['diff_hi']:+.3f}]"
                               for r in top.to_dict("records")) + f"; `{paths['maskcount_md']}`")
    else:
        out.append("- **5. mask count**: not run")
    return out


def summary_markdown(comparisons: pd.DataFrame | None, attention: pd.DataFrame | None, lora: pd.DataFrame | None,
                     maskcount: pd.DataFrame | None, arms: Mapping[str, Mapping[str, Any]],
                     paths: Mapping[str, str]) -> str:
    """results/probes/summary.md: one section per probe with its headline number and where to look."""
    lines = ["# Mechanism probes: summary", "",
             "Headline numbers of each probe (PROTOCOL \"Mechanism probes\", and the seed-002 mask-count "
             "probe). Every number comes from the files named in its section.", ""]
    comp = comparisons if comparisons is not None else pd.DataFrame(columns=["name", "a", "b"])
    by_name = {r["name"]: r for r in comp.to_dict("records")}
    lines += ["## Headlines (one line per probe)", ""]
    lines += headline_lines(by_name, attention, lora, maskcount, paths)
    lines.append("")

    lines += ["## 1. Direction of asymmetry: reverse vs random", ""]
    row = by_name.get("heldout_reverse_vs_random")
    if row is None:
        rows = [r for r in comp.to_dict("records") if {r["a"], r["b"]} == {"reverse", "random"}]
        row = rows[0] if rows else None
    if row is not None:
        lines += [f"- {_comparison_line(row)}.",
                  f"- Source: `{paths['comparisons']}` (also in "
                  "`results/tables/headline.md`)."]
    else:
        lines.append("- No reverse vs random comparison is configured (`statistics.comparisons`).")
    lines.append("")

    lines += ["## 2. Attention instrumentation", ""]
    if attention is not None and len(attention):
        means = attention.groupby(["arm", "target"])["mass"].mean().unstack("target")
        strategies = attention.groupby("arm")["strategy"].first().to_dict()
        from anchormask.figures import order_arms

        order = order_arms(list(means.index))
        base = _base_arm(order, {a: None if _null(s) else s for a, s in strategies.items()})
        lines += ["Mean over layers and heads of the attention mass from generated-answer positions "
                  "(averaged over answer positions, denoising steps and queries) onto the question prefix and "
                  "onto the locked anchor" + (f"; Δ = arm − {base}." if base else "."), "",
                  "| arm | prefix | anchor | Δ prefix | Δ anchor |", "|---|---:|---:|---:|---:|"]
        for arm in order:
            p, a = means.loc[arm, "prefix"], means.loc[arm, "anchor"]
            dp = p - means.loc[base, "prefix"] if base else float("nan")
            da = a - means.loc[base, "anchor"] if base else float("nan")
            lines.append(f"| {arm} | {p:.3f} | {a:.3f} | {tables.number(dp, '+.3f')} | {tables.number(da, '+.3f')} |")
        lines += ["", f"- Per layer and head: `{paths['attention']}`; "
                  f"heatmaps (per arm and arm − base): `{paths['attention_figure']}`.",
                  ""]
    else:
        lines += ["- Not run (`probes.attention_arms` is empty) or not available for this model (the reason is "
                  f"in the metadata of `{paths['attention']}`).", ""]

    lines += ["## 3. LoRA weight allocation", ""]
    if lora is not None and len(lora):
        shares = lora.pivot_table(index="arm", columns="kind", values="share", aggfunc="first")
        norms = lora.groupby("arm")["fro_norm"].apply(lambda s: float(np.sqrt((s ** 2).sum())))
        from anchormask.figures import order_arms

        lines += ["Share of each adapter's Σ‖ΔW‖²_F (ΔW = (α/r)·B A) per projection kind, and the total ‖ΔW‖_F "
                  "(mean over the arm's adapters).", "",
                  "| arm | targets | Q | K | V | O | V+O | total ‖ΔW‖_F |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        targets = lora.groupby("arm")["targets"].first()
        for arm in order_arms(list(shares.index)):
            s = {k: shares.loc[arm].get(k, np.nan) for k in KINDS}
            vo = np.nansum([s["v"], s["o"]])
            lines.append(f"| {arm} | {targets[arm]} | " + " | ".join(tables.number(s[k]) for k in KINDS)
                         + f" | {vo:.3f} | {norms[arm]:.3f} |")
        lines += ["", f"- Per layer: `{paths['lora_layers']}`; per kind: "
                  f"`{paths['lora']}`; figure: "
                  f"`{paths['lora_figure']}`.", ""]
    else:
        lines += ["- Not run (no adapter arms).", ""]

    lines += ["## 4. Direct V/O ablation", ""]
    ablation = [r for r in comp.to_dict("records")
                if any((arms.get(r[s]) or {}).get("targets") in ("vo", "qk") for s in ("a", "b"))]
    for r in ablation:
        lines.append(f"- {_comparison_line(r)}.")
    if not ablation:
        lines.append("- No comparison involving a vo or qk arm is configured (`statistics.comparisons`).")
    lines += [f"- Figure: `{paths['ablation']}` (full / vo / qk for anchor and "
              "random, held-out pooled, base as reference).", ""]

    lines += ["## 5. Mask-count robustness (seed 002)", ""]
    if maskcount is not None and len(maskcount):
        split = "held_out" if (maskcount["split"] == "held_out").any() else "all"
        part = maskcount[maskcount["split"] == split]
        kmax, k0 = int(part["k"].max()), int(part["k0"].iloc[0])
        lines.append(f"Mean corpus_overlap ({split.replace('_', '-')} queries) at k = {k0} and k = {kmax} extra "
                     "masks, and the paired difference:")
        lines.append("")
        from anchormask.figures import order_arms

        for arm in order_arms(list(part["arm"].unique())):
            a0 = part[(part["arm"] == arm) & (part["k"] == k0)].iloc[0]
            am = part[(part["arm"] == arm) & (part["k"] == kmax)].iloc[0]
            lines.append(f"- {arm}: {a0['mean']:.3f} -> {am['mean']:.3f}, Δ {am['diff']:+.3f} "
                         f"[{am['diff_lo']:+.3f}, {am['diff_hi']:+.3f}], P(Δ<0) = {am['p_below_k0']:.3f} "
                         f"(N = {int(am['n'])}).")
        lines += [f"- Table: `{paths['maskcount_md']}` "
                  f"(`{paths['maskcount']}`); figure: "
                  f"`{paths['maskcount_figure']}`.", ""]
    else:
        lines += ["- Not run (`probes.maskcount_k` or its arms are empty).", ""]
    return "\n".join(lines)
