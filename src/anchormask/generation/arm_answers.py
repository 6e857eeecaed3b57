"""One generation job: every query of the study, answered by one arm, as JSONL records."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from anchormask import checksum, fileio
from anchormask.generation import sampler
from anchormask.model import backbone as bb
from anchormask.model import layout, modeljob
from anchormask.model.adapters import PROVENANCE
from anchormask.progress import Progress
from anchormask.repro import provenance

log = logging.getLogger(__name__)


def post_anchor_ids(result: sampler.Result, end_id: int | None) -> list[int]:
    """What the model wrote after the locked anchor, up to the first end-of-answer token."""
    tail = result.slot_ids[result.locked:]
    return tail[: tail.index(end_id)] if end_id in tail else tail


def split_post_anchor(tokenizer, slot_ids: list[int], locked: int, tail: list[int]) -> tuple[str, bool]:
    """The post-anchor text and whether the model continued the anchor's last word.

    The anchor and its continuation are decoded together and the anchor's text is cut off, so
    a word piece after the anchor joins its word (``flow`` + ``##s``) instead of printing as
    ``##s``; such a piece belongs to the anchor's word and is not part of the continuation.
    """
    anchor = tokenizer.decode(slot_ids[:locked], skip_special_tokens=True)
    whole = tokenizer.decode(slot_ids[:locked] + tail, skip_special_tokens=True)
    if not whole.startswith(anchor):  # decoder clean-up changed the anchor's spelling: decode apart
        return tokenizer.decode(tail, skip_special_tokens=True).strip(), False
    rest = whole[len(anchor):]
    mid_word = bool(anchor) and anchor[-1].isalnum() and rest[:1].isalnum()
    if mid_word:
        rest = re.sub(r"^[^\W_]+", "", rest)
    return rest.strip(), mid_word


def requests_for(backbone: bb.Backbone, retrieved: list[dict[str, Any]]) -> list[sampler.Request]:
    tok = backbone.tokenizer
    return [sampler.Request(r["query_id"], layout.prompt_ids(tok, r["query"], backbone.template),
                            layout.anchor_ids(tok, r["statement"])) for r in retrieved]


def generation_records(backbone: bb.Backbone, runtime: bb.Runtime, retrieved: list[dict[str, Any]],
                       settings: sampler.SamplerSettings, identity: dict[str, Any],
                       on_batch=None) -> list[dict[str, Any]]:
    tok = backbone.tokenizer
    requests = requests_for(backbone, retrieved)
    results = sampler.generate(backbone, runtime, requests, settings, on_batch=on_batch)
    end_id = backbone.ids.end
    records = []
    for query, request, result in zip(retrieved, requests, results):
        if result.anchor_truncated:
            log.warning("query %s: anchor truncated from %d to %d tokens (generation.answer_len %d leaves room for "
                        "one generated token); the record says anchor_truncated", query["query_id"],
                        len(request.anchor_ids), result.locked, settings.answer_len)
        tail = post_anchor_ids(result, end_id)
        post_text, mid_word = split_post_anchor(tok, result.slot_ids, result.locked, tail)
        records.append({
            "query_id": query["query_id"], "domain": query["domain"], "split": query["split"],
            "query_set": query["query_set"],
            **identity,
            "query": query["query"], "statement_id": query["statement_id"], "statement": query["statement"],
            "locked_tokens": result.locked, "anchor_truncated": result.anchor_truncated,
            "generated_text": tok.decode(result.slot_ids, skip_special_tokens=True),
            "post_anchor_text": post_text, "continues_anchor_word": mid_word,
            "post_anchor_tokens": len(tail), "ended": end_id in result.slot_ids[result.locked:],
            "forward_passes": result.forward_passes,
            "sampler": settings.record(), "seed": settings.seed,
        })
    return records


def run_arm(*, arm: str, strategy: str | None, targets: str | None, adapters: list[str],
            retrieval_files: list[str], out: str, base: modeljob.Base, settings: sampler.SamplerSettings,
            threads: int) -> int:
    """Generate for every retrieved query with each adapter of the arm (one per training seed)."""
    runtime = modeljob.start(base, threads)
    retrieved = [rec for path in retrieval_files for rec in fileio.read_jsonl(path)]
    records: list[dict[str, Any]] = []
    progress = Progress(f"generate {arm}", max(1, len(adapters)) * len(retrieved), log_every=1,
                        unit="generation")
    for adapter in adapters or (None,):
        backbone = modeljob.load(base, runtime, adapter)
        done = len(records)
        records += generation_records(backbone, runtime, retrieved, settings,
                                      _identity(arm, strategy, targets, adapter, base),
                                      on_batch=lambda n, done=done: progress.update(done + n))
    return fileio.write_jsonl(out, records)


def _identity(arm: str, strategy: str | None, targets: str | None, adapter: str | None,
              base: modeljob.Base) -> dict[str, Any]:
    job = fileio.read_json(Path(adapter) / PROVENANCE)["job"] if adapter else {}
    return {
        "arm": arm, "strategy": strategy, "targets": targets, "train_size": job.get("size"),
        "train_steps": job.get("steps"), "train_seed": job.get("seed"), "adapter_id": job.get("id"),
        "adapter_sha256": checksum.directory_sha256(adapter) if adapter else None,
        "base_sha256": base.sha256, "versions": provenance.versions(),
    }
