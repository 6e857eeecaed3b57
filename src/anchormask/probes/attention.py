"""Attention mass (probe 2 of docs/protocol.md, "Mechanism probes").

Each arm (the base, and the base with one adapter merged) answers every retrieved query with the
anchor locked, through ``sampler.generate``. Its observer records the attention probabilities of
each denoising step's own forward pass (one pass per step, not a second one): the pass is asked for
``output_attentions`` (the model loaded with ``attn_implementation="eager"``, which computes them
anyway) or, for families whose code refuses that (LLaDA, Dream), torch's scaled_dot_product_attention
calls are recorded while the model's own calls run unchanged. From them it measures, per layer and
head, the attention probability that flows from the generated answer positions onto (a) the
question prefix and (b) the locked anchor.

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

The table is written through ``tables.write_parquet``; the heatmaps are drawn by
``reporting.probe_figures.attention_figure``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from anchormask import checksum, fileio
from anchormask.fileio import InputError
from anchormask.generation import arm_answers, sampler
from anchormask.measurement import tables
from anchormask.model import modeljob
from anchormask.repro import provenance

#: The two spans the attention mass is measured onto, in the order of the last axis of ``attention_mass_rows``.
ATTENDED_SPANS = ("prefix", "anchor")

_str, _int, _f64 = pa.string(), pa.int64(), pa.float64()

ATTENTION_SCHEMA = tables.arrow_schema([
    ("arm", _str, False), ("strategy", _str, True), ("targets", _str, True), ("layer", _int, False),
    ("head", _int, False), ("target", _str, False), ("mass", _f64, False), ("queries", _int, False),
    ("adapters", _int, False),
])

ATTENTION_DEFINITION = (
    "mass onto X = mean over queries (and adapters) of the mean over denoising steps (those with a masked "
    "slot position left) of the mean over generated-answer positions (slot positions after the locked "
    "anchor) of the summed attention probability onto X; prefix = positions [0, slot_start) ([CLS] and "
    "[SEP] included), anchor = the locked anchor positions [slot_start, slot_start + locked)")


def attention_mass_rows(attentions: Sequence[Any], answer_mask: Any, prefix_mask: Any, locked_mask: Any) -> np.ndarray:
    """[batch, layers, heads, 2] (prefix, anchor): per row, the mean over its answer positions of the
    summed attention probability onto its prefix / locked-anchor positions.

    ``attentions``: one [batch, heads, seq, seq] array per layer (query positions on axis 2, key
    positions on axis 3, rows summing to 1); the masks are boolean [batch, seq]. Rows without
    answer positions give NaN.
    """
    import torch

    answer = torch.as_tensor(answer_mask).bool()
    onto = torch.stack([torch.as_tensor(prefix_mask).bool(), torch.as_tensor(locked_mask).bool()], -1)
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



def observation_masks(obs):
    """(answer, prefix, locked anchor) boolean [batch, seq] masks of one ``sampler.Observation``:
    answer = [slot_start + locked, slot_start + answer_len), prefix = [0, slot_start) (real tokens),
    locked anchor = [slot_start, slot_start + locked)."""
    import torch

    width = obs.input_ids.shape[1]
    pos = torch.arange(width)[None, :]
    start = obs.slot_start[:, None].to(torch.long).cpu()
    lock_end = start + obs.locked[:, None].to(torch.long).cpu()
    prefix = (pos < start) & obs.attention_mask.bool().cpu()
    locked_anchor = (pos >= start) & (pos < lock_end)
    answer = (pos >= lock_end) & (pos < start + obs.answer_len)
    return answer, prefix, locked_anchor


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


@contextlib.contextmanager
def _sdpa_passes(model):
    """Per forward pass of ``model`` inside the block, the SDPA probabilities it computed (one list
    per pass, in call order; filled as the block exits)."""
    passes: list[list[Any]] = []
    starts: list[int] = []
    with recorded_sdpa() as seen:
        handle = model.register_forward_pre_hook(lambda module, args: starts.append(len(seen)))
        try:
            yield passes
        finally:
            handle.remove()
    passes.extend(seen[a:b] for a, b in zip(starts, starts[1:] + [len(seen)]))


@contextlib.contextmanager
def _returned_passes(model):
    """Per forward pass of ``model`` inside the block, the attentions it returns: each pass is asked
    for ``output_attentions`` (with eager attention the probabilities it computes anyway, so its
    other outputs are unchanged)."""
    passes: list[Any] = []

    def ask(module, args, kwargs):
        return args, {**kwargs, "output_attentions": True}

    def keep(module, args, output):
        passes.append(getattr(output, "attentions", None))

    handles = [model.register_forward_pre_hook(ask, with_kwargs=True), model.register_forward_hook(keep)]
    try:
        yield passes
    finally:
        for handle in handles:
            handle.remove()


def recorded_attentions(backbone):
    """A context manager: inside it, every forward pass of the backbone's model also records its per-layer
    attention probabilities; it yields a list that holds, once the block is left, one entry per pass in call
    order (read one with ``pass_attentions``). Families that return attentions are asked for them
    (``output_attentions``); those whose code refuses that (LLaDA, Dream) have torch's SDPA recorded."""
    if backbone.family.attentions == "sdpa":
        return _sdpa_passes(backbone.model)
    return _returned_passes(backbone.model)


def pass_attentions(backbone, passes: Sequence[Any], index: int = 0):
    """The per-layer attention probabilities of pass ``index`` recorded by ``recorded_attentions``;
    AttentionUnavailable when the model exposed none."""
    attentions = passes[index] if len(passes) > index else None
    if backbone.family.attentions == "sdpa" and not attentions:
        raise AttentionUnavailable(f"{backbone.path}: the {backbone.family.name} model computed attention "
                                   "without torch's scaled_dot_product_attention; its probabilities cannot "
                                   "be recorded")
    if not attentions or any(a is None for a in attentions):
        raise AttentionUnavailable(f"{backbone.path}: the model returned no attention probabilities; load it "
                                   "with attn_implementation='eager' (SDPA and flash attention do not expose them)")
    return attentions


def attention_forward(backbone, input_ids, attention_mask):
    """The per-layer attention probabilities of one forward pass (the head swapped out: no logits needed)."""
    with recorded_attentions(backbone) as passes:
        backbone.hidden_states(input_ids, attention_mask)
    return pass_attentions(backbone, passes)


def attention_probe(backbone, runtime, requests, settings) -> dict[str, np.ndarray]:
    """Query id -> [layers, heads, 2] mass (prefix, anchor), averaged over its denoising steps; read from
    the sampler's own forward pass of each step (the observer records around it)."""
    sums: dict[str, np.ndarray] = {}
    steps: dict[str, int] = {}

    @contextlib.contextmanager
    def observe(obs):
        with recorded_attentions(backbone) as passes:
            yield
        # Pass 0 is the step's pass on the observed input (cfg_scale > 0 adds one with the prompt masked).
        rows = attention_mass_rows(pass_attentions(backbone, passes), *observation_masks(obs))
        active = obs.masked.any(1).tolist()
        for b, qid in enumerate(obs.query_ids):
            if active[b]:
                sums[qid] = sums.get(qid, 0.0) + rows[b]
                steps[qid] = steps.get(qid, 0) + 1

    sampler.generate(backbone, runtime, requests, settings, observer=observe)
    return {qid: sums[qid] / steps[qid] for qid in sums}


def attention_table(arms: Sequence[Mapping[str, Any]], retrieval_files: Sequence[str], base: modeljob.Base,
                    settings, threads: int = 1) -> pd.DataFrame:
    """One row per (arm, layer, head, target). ``arms``: dicts with arm, strategy, targets, adapters."""
    runtime = modeljob.start(base, threads)
    retrieved = [rec for path in retrieval_files for rec in fileio.read_jsonl(path)]
    if not retrieved:
        raise InputError("attention probe: the retrieval files hold no queries")
    rows, adapters_meta, unavailable = [], {}, {}
    for spec in arms:
        per_adapter = []
        for adapter in spec["adapters"] or [None]:
            # Eager attention returns probabilities; remote code keeps its own SDPA, which the probe records.
            backbone = modeljob.load(base, runtime, adapter,
                                     attn_implementation=None if base.trust_remote_code else "eager")
            requests = arm_answers.requests_for(backbone, retrieved)
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
                for t, target in enumerate(ATTENDED_SPANS):
                    rows.append({"arm": spec["arm"], "strategy": spec.get("strategy"), "targets": spec.get("targets"),
                                 "layer": layer, "head": head, "target": target, "mass": float(mass[layer, head, t]),
                                 "queries": len(retrieved), "adapters": len(spec["adapters"])})
    df = pd.DataFrame(rows, columns=ATTENTION_SCHEMA.names)
    df.attrs["anchormask"] = {
        "table": "probe_attention", "definition": ATTENTION_DEFINITION,
        "inputs": [tables.file_entry(p) for p in retrieval_files], "adapters": adapters_meta,
        "base": {"path": base.path, "sha256": base.sha256}, "sampler": settings.record(),
        "seed": settings.seed, "runtime": runtime.name, "versions": provenance.versions(),
    }
    if unavailable:  # a statement in the output, not a crash that stops the `all` target
        df.attrs["anchormask"]["not_available"] = unavailable
    return df
