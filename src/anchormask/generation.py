"""One generation job: every query of the study, answered by one arm, as JSONL records."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from anchormask import backbone as bb
from anchormask import checksum, io, layout, provenance, sampler, train
from anchormask.progress import Progress

log = logging.getLogger(__name__)


def load_adapted(base_path: str, adapter_dir: str | None, *, trust_remote_code: bool,
                 runtime: bb.Runtime, attn_implementation: str | None = None) -> bb.Backbone:
    """The base, with one adapter merged into its weights (none for the base arm)."""
    backbone = bb.load_backbone(base_path, trust_remote_code=trust_remote_code, runtime=runtime,
                                attn_implementation=attn_implementation)
    if adapter_dir is not None:
        from peft import PeftModel

        train.check_adapter(adapter_dir)
        backbone.model = PeftModel.from_pretrained(backbone.model, adapter_dir).merge_and_unload()
    backbone.model.eval()
    return backbone


def answer_end_id(tokenizer) -> int | None:
    return getattr(tokenizer, "sep_token_id", None) or getattr(tokenizer, "eos_token_id", None)


def post_anchor_ids(result: sampler.Result, end_id: int | None) -> list[int]:
    """What the model wrote after the locked anchor, up to the first end-of-answer token."""
    tail = result.slot_ids[result.locked:]
    return tail[: tail.index(end_id)] if end_id in tail else tail


def requests_for(tokenizer, retrieved: list[dict[str, Any]]) -> list[sampler.Request]:
    return [sampler.Request(r["query_id"], layout.prompt_ids(tokenizer, r["query"]),
                            layout.anchor_ids(tokenizer, r["statement"])) for r in retrieved]


def generation_records(backbone: bb.Backbone, runtime: bb.Runtime, retrieved: list[dict[str, Any]],
                       settings: sampler.SamplerSettings, identity: dict[str, Any],
                       on_batch=None) -> list[dict[str, Any]]:
    tok = backbone.tokenizer
    results = sampler.generate(backbone, runtime, requests_for(tok, retrieved), settings, on_batch=on_batch)
    end_id = answer_end_id(tok)
    records = []
    for query, result in zip(retrieved, results):
        tail = post_anchor_ids(result, end_id)
        records.append({
            "query_id": query["query_id"], "domain": query["domain"], "split": query["split"],
            **identity,
            "query": query["query"], "statement_id": query["statement_id"], "statement": query["statement"],
            "locked_tokens": result.locked, "anchor_truncated": result.anchor_truncated,
            "generated_text": tok.decode(result.slot_ids, skip_special_tokens=True),
            "post_anchor_text": tok.decode(tail, skip_special_tokens=True),
            "post_anchor_tokens": len(tail), "ended": end_id in result.slot_ids[result.locked:],
            "forward_passes": result.forward_passes,
            "sampler": settings.record(), "seed": settings.seed,
        })
    return records


def run_arm(*, arm: str, strategy: str | None, targets: str | None, adapters: list[str],
            retrieval_files: list[str], out: str, base: dict[str, Any], settings: sampler.SamplerSettings,
            threads: int) -> int:
    """Generate for every retrieved query with each adapter of the arm (one per training seed)."""
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    runtime = bb.pick_runtime(base.get("device", "auto"))
    retrieved = [rec for path in retrieval_files for rec in io.read_jsonl(path)]
    records: list[dict[str, Any]] = []
    progress = Progress(f"generate {arm}", max(1, len(adapters)) * len(retrieved), log_every=1,
                        unit="generation")
    for adapter in adapters or [None]:
        backbone = load_adapted(base["path"], adapter, trust_remote_code=base.get("trust_remote_code", False),
                                runtime=runtime)
        done = len(records)
        records += generation_records(backbone, runtime, retrieved, settings,
                                      _identity(arm, strategy, targets, adapter, base),
                                      on_batch=lambda n, done=done: progress.update(done + n))
    return io.write_jsonl(out, records)


def _identity(arm: str, strategy: str | None, targets: str | None, adapter: str | None,
              base: dict[str, Any]) -> dict[str, Any]:
    job = io.read_json(Path(adapter) / "provenance.json")["job"] if adapter else {}
    return {
        "arm": arm, "strategy": strategy, "targets": targets, "train_size": job.get("size"),
        "train_steps": job.get("steps"), "train_seed": job.get("seed"), "adapter_id": job.get("id"),
        "adapter_sha256": checksum.directory_sha256(adapter) if adapter else None,
        "base_sha256": base["sha256"], "versions": provenance.versions(),
    }
