"""2. Sampler throughput: anchormask.generation.sampler.generate (batched) against a one-query-at-a-time
LLaDA-style loop (bench.reference.reference_generate), on the study's 63 retrieved queries.

The model is the anchor arm's: the default anchor / full adapter trained on the current
data/base (by this run's memory benchmark, or now), merged into the base as the generation
jobs do. Greedy decoding (temperature 0) with the configured answer_len, steps and
remasking; the two samplers must write identical tokens for every query (tests/test_sampler.py asserts
it; a run where they differ stops, since a speed-up between different outputs means nothing). The
project's sampler runs once untimed (warm-up), then four times: before, between and after the three thirds of the
reference. Its time is the mean of the four runs, so drift on a shared machine falls on both
sides. Then, separately, ``decoding: threshold``: forward passes and wall time against fixed,
and how the mean corpus_overlap of the post-anchor text moves.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench import common, flops
from bench.common import Line, say
from bench.reference import reference_generate


class ForwardClock:
    """Times and counts the backbone's forward calls during generate(), and their matmul FLOPs.

    The FLOPs come from the shapes actually run: the encoder over the batch's (rows, width),
    the vocabulary head over the positions it is given.
    """

    def __init__(self, backbone):
        self.seconds, self.calls, self.flops = 0.0, 0, 0
        self.backbone = backbone
        self.shape = flops.Shape.of(backbone.model)
        self.originals = (backbone.hidden_states, backbone.logits_from_hidden)

    def __enter__(self):
        hidden, head = self.originals

        def timed_hidden(input_ids, attention_mask):
            t = time.perf_counter()
            try:
                return hidden(input_ids, attention_mask)
            finally:
                self.seconds += time.perf_counter() - t
                self.calls += 1
                rows, width = input_ids.shape
                self.flops += (flops.encoder_linear(self.shape, rows * width)
                               + flops.encoder_attention(self.shape, rows, width))

        def timed_head(h):
            t = time.perf_counter()
            try:
                return head(h)
            finally:
                self.seconds += time.perf_counter() - t
                self.flops += flops.head(self.shape, h.shape[0])

        self.backbone.hidden_states, self.backbone.logits_from_hidden = timed_hidden, timed_head
        return self

    def __exit__(self, *exc):
        del self.backbone.hidden_states, self.backbone.logits_from_hidden  # back to the class's methods
        return False


def run_reference(backbone, requests, settings, suppressed) -> tuple[list[list[int]], int, int]:
    shape = flops.Shape.of(backbone.model)
    outputs, passes, total_flops = [], 0, 0
    for req in requests:
        slot, n = reference_generate(backbone.model, req.prompt_ids, req.anchor_ids, answer_len=settings.answer_len,
                                     steps=settings.steps, mask_id=backbone.mask_token_id, suppressed=suppressed,
                                     temperature=0.0, extra_masks=settings.extra_masks,
                                     block_len=getattr(settings, "block_len", 0))
        width = len(req.prompt_ids) + settings.answer_len + settings.extra_masks
        outputs.append(slot)
        passes += n
        total_flops += n * flops.forward(shape, 1, width, width)
    return outputs, passes, total_flops


def timed_generate(backbone, runtime, requests, settings):
    """(results, wall seconds, ForwardClock) of one sampler.generate over every request."""
    from anchormask.generation import sampler

    with ForwardClock(backbone) as clock:
        t = time.perf_counter()
        results = sampler.generate(backbone, runtime, requests, settings)
        wall = time.perf_counter() - t
    return results, wall, clock


@dataclass
class Reference:
    """The one-query-at-a-time loop's outputs and totals over all thirds."""

    outputs: list[list[int]] = field(default_factory=list)
    passes: int = 0
    flops: int = 0
    wall: float = 0.0


def interleaved(backbone, runtime, requests, settings, suppressed, chunks: int = 3) -> tuple[list, Reference]:
    """The project's sampler over every query, then a third of the reference, and again, ending with the
    project: load drift falls on both sides. (project runs, reference totals)."""
    n = len(requests)
    runs, ref = [], Reference()
    bounds = [round(i * n / chunks) for i in range(chunks + 1)]
    for c in range(chunks + 1):
        runs.append(timed_generate(backbone, runtime, requests, settings))
        say(f"sampler: project   run {c + 1}   {runs[-1][1]:7.2f} s ({runs[-1][2].calls} batch forward passes, "
            f"{runs[-1][2].seconds:.2f} s in them)")
        if c == chunks:
            break
        t = time.perf_counter()
        out, passes, fl = run_reference(backbone, requests[bounds[c]:bounds[c + 1]], settings, suppressed)
        dt = time.perf_counter() - t
        ref.outputs += out
        ref.passes += passes
        ref.flops += fl
        ref.wall += dt
        say(f"sampler: reference queries {bounds[c] + 1}-{bounds[c + 1]}: {dt:7.2f} s ({passes} forward passes, "
            f"one query at a time)")
    return runs, ref


def anchor_arm(cfg: dict[str, Any], threads: int):
    """(backbone, runtime, where the adapter came from): the base with the default anchor / full adapter
    merged, on the CPU, as the generation jobs load it."""
    from anchormask.model import backbone as bb
    from anchormask.model import modeljob

    runtime = bb.pick_runtime("cpu")
    adapter, adapter_source = common.default_adapter(cfg, threads)
    say(f"sampler: arm anchor, adapter {adapter_source}")
    return modeljob.load(common.base(cfg, "cpu"), runtime, str(adapter)), runtime, adapter_source


def run(threads: int | None = None) -> tuple[dict, list[Line]]:
    import torch

    from anchormask.generation import arm_answers, decoding, sampler

    cfg = common.load_config()
    threads = common.job_threads(cfg, "generation", threads)
    common.set_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)  # as every generation job runs
    rate = common.matmul_rate(threads)
    say(f"sampler: matmul rate {rate['gflops_median']:.1f} GFLOP/s (fp32 {rate['n']}^3, {threads} threads)")
    settings = dataclasses.replace(sampler.SamplerSettings.from_config(cfg["generation"]), temperature=0.0,
                                   decoding="fixed")
    backbone, runtime, adapter_source = anchor_arm(cfg, threads)
    retrieved = common.retrieved_queries(cfg)
    requests = arm_answers.requests_for(backbone, retrieved)
    suppressed = decoding.suppressed_token_ids(backbone)
    warm = sampler.generate(backbone, runtime, requests, settings)  # warm-up
    reference_generate(backbone.model, requests[0].prompt_ids, requests[0].anchor_ids, answer_len=settings.answer_len,
                       steps=2, mask_id=backbone.mask_token_id, suppressed=suppressed)  # warm-up
    runs, ref = interleaved(backbone, runtime, requests, settings, suppressed)
    speed = throughput(runs, ref, rate, len(requests))
    mismatched = [r.query_id for r, out in zip(runs[0][0], ref.outputs) if r.slot_ids != out]
    unstable = sorted({r.query_id for run_ in runs for r, w in zip(run_[0], warm) if r.slot_ids != w.slot_ids})
    say(f"sampler: {len(requests) / speed['project_wall']:.2f} vs {len(requests) / speed['reference_wall']:.2f} "
        f"generations/s; project forward passes {speed['project_gflops']:.1f} GFLOP/s over the whole "
        f"generate() ({100 * speed['matmul_fraction']:.0f}% of the matmul rate), "
        f"{speed['inside_forward_gflops']:.1f} GFLOP/s inside the forward calls; "
        f"identical tokens: {not mismatched} ({len(requests) - len(mismatched)}/{len(requests)})")
    threshold = threshold_experiment(cfg, backbone, runtime, requests, retrieved, settings, runs[0],
                                     speed["project_wall"])
    payload = {
        "benchmark": "sampler",
        "description": "generations/s of anchormask.generation.sampler.generate (one batch) vs a one-query-at-a-time "
                       "LLaDA-style "
                       "generate() (full forward per step, float64 softmax over the full vocabulary at every position)",
        "threads": threads, "queries": len(requests),
        "settings": settings.record() | {"batch_size": settings.batch_size},
        "matmul_rate": rate, "arm": "anchor", "adapter": adapter_source,
        "project": speed["project"],
        "reference": speed["reference"],
        "identical_tokens": not mismatched, "mismatched_queries": mismatched, "project_runs_identical": not unstable,
        "speedup": round(speed["speedup"], 3), "target_speedup": 3.0, "target_matmul_fraction": 0.5,
        "threshold_decoding": threshold,
    }
    found = lines(speed, threshold, rate, len(requests))
    if mismatched:  # the numbers above are printed and returned first; then the benchmark fails loudly
        for line in found:
            say(line.format())
        raise AssertionError(f"project and reference samplers differ on {len(mismatched)}/{len(requests)} queries: "
                             f"{mismatched[:10]}")
    return payload, found


def throughput(runs: list, ref: Reference, rate: dict[str, Any], n: int) -> dict[str, Any]:
    """Both sides' rates; the project's wall time is the mean of its runs, its FLOPs those of one run (the
    same passes every run: greedy, deterministic)."""
    project_wall = sum(r[1] for r in runs) / len(runs)
    forward_wall = sum(r[2].seconds for r in runs) / len(runs)
    results, clock = runs[0][0], runs[0][2]
    project_gflops = clock.flops / project_wall / 1e9
    inside = clock.flops / forward_wall / 1e9
    return {
        "project": {"wall_s_runs": [round(r[1], 3) for r in runs], "wall_s": round(project_wall, 3),
                    "generations_per_s": round(n / project_wall, 3), "batch_forward_passes": clock.calls,
                    "query_forward_passes": sum(r.forward_passes for r in results),
                    "forward_flops": clock.flops, "gflops_per_s": round(project_gflops, 3),
                    "matmul_fraction": round(project_gflops / rate["gflops_median"], 4),
                    "seconds_in_forward": round(forward_wall, 3),
                    "matmul_fraction_inside_forward": round(inside / rate["gflops_median"], 4)},
        "reference": {"wall_s": round(ref.wall, 3), "generations_per_s": round(n / ref.wall, 3),
                      "forward_passes": ref.passes, "forward_flops": ref.flops,
                      "gflops_per_s": round(ref.flops / ref.wall / 1e9, 3),
                      "matmul_fraction": round(ref.flops / ref.wall / 1e9 / rate["gflops_median"], 4)},
        "project_wall": project_wall, "reference_wall": ref.wall,
        "speedup": ref.wall / project_wall, "inside_forward_gflops": inside,
        "project_gflops": project_gflops, "matmul_fraction": project_gflops / rate["gflops_median"],
        "inside_forward_fraction": inside / rate["gflops_median"],
    }


def post_anchor_overlaps(backbone, results, retrieved, vocabs) -> tuple[np.ndarray, list[str]]:
    """Each query's post-anchor text and its corpus_overlap with its own domain's corpus."""
    from anchormask.generation import arm_answers
    from anchormask.measurement import metric

    end_id = backbone.ids.end
    texts = [backbone.tokenizer.decode(arm_answers.post_anchor_ids(r, end_id), skip_special_tokens=True)
             for r in results]
    return np.array([metric.score(t, vocabs[q["domain"]]).overlap for t, q in zip(texts, retrieved)]), texts


def threshold_experiment(cfg: dict[str, Any], backbone, runtime, requests, retrieved, settings, fixed_run,
                         fixed_wall: float) -> dict[str, Any]:
    """``decoding: threshold`` against the fixed run: forward passes, wall time, and the paired bootstrap of
    the mean corpus_overlap's change."""
    from anchormask.measurement import metric, tables
    from anchormask.stats import bootstrap

    th_settings = dataclasses.replace(settings, decoding="threshold")
    th_res, th_wall, th_clock = timed_generate(backbone, runtime, requests, th_settings)
    fixed_res, _, fixed_clock = fixed_run
    corpora_dir = common.repo_path(cfg["data"]["corpora_dir"])
    vocabs = tables.load_vocabularies({d: corpora_dir / f"{d}.jsonl" for d in {r["domain"] for r in retrieved}})
    fixed_ov, fixed_texts = post_anchor_overlaps(backbone, fixed_res, retrieved, vocabs)
    th_ov, th_texts = post_anchor_overlaps(backbone, th_res, retrieved, vocabs)
    stats = cfg["statistics"]
    boot = bootstrap.paired_bootstrap(th_ov, fixed_ov, stats["resamples"], stats["confidence"],
                                      np.random.default_rng(stats["seed"]))
    fixed_passes = sum(r.forward_passes for r in fixed_res)
    th_passes = sum(r.forward_passes for r in th_res)
    per_query = [r.forward_passes for r in th_res]
    with_words = {"fixed": int(sum(bool(metric.word_tokens(t)) for t in fixed_texts)),
                  "threshold": int(sum(bool(metric.word_tokens(t)) for t in th_texts))}
    threshold = {
        "threshold": th_settings.threshold,
        "batch_forward_passes": {"fixed": fixed_clock.calls, "threshold": th_clock.calls},
        "query_forward_passes": {"fixed": fixed_passes, "threshold": th_passes, "saved": fixed_passes - th_passes,
                                 "saved_fraction": round(1 - th_passes / fixed_passes, 4)},
        # every pass committing just the one forced (most confident) token: no prediction reached the threshold
        "one_commit_per_pass": th_passes == sum(settings.answer_len - r.locked for r in th_res),
        "per_query_passes_threshold": {"min": min(per_query), "median": float(np.median(per_query)),
                                       "max": max(per_query)},
        "wall_s": {"fixed": round(fixed_wall, 3), "threshold": round(th_wall, 3),
                   "saved": round(fixed_wall - th_wall, 3), "saved_fraction": round(1 - th_wall / fixed_wall, 4)},
        "mean_corpus_overlap": {"fixed": float(fixed_ov.mean()), "threshold": float(th_ov.mean()),
                                "diff": float(th_ov.mean() - fixed_ov.mean()),
                                "diff_ci95": [boot["diff_lo"], boot["diff_hi"]],
                                "queries_with_changed_text": int(sum(a != b for a, b in zip(fixed_texts, th_texts))),
                                "queries_with_word_tokens": with_words},
    }
    say(f"sampler: threshold {th_settings.threshold}: {th_clock.calls} vs {fixed_clock.calls} batch forward passes, "
        f"{th_passes} vs {fixed_passes} per-query passes"
        f"{' (one commit per pass: no prediction reached the threshold)' if threshold['one_commit_per_pass'] else ''}, "
        f"{th_wall:.2f} vs {fixed_wall:.2f} s; "
        f"mean corpus_overlap {th_ov.mean():.4f} vs {fixed_ov.mean():.4f} "
        f"(diff {th_ov.mean() - fixed_ov.mean():+.4f}, 95% CI [{boot['diff_lo']:+.4f}, {boot['diff_hi']:+.4f}]); "
        f"post-anchor texts with any word token: {with_words['threshold']} vs {with_words['fixed']} of {len(requests)}")
    return threshold


def lines(speed: dict[str, Any], threshold: dict[str, Any], rate: dict[str, Any], n: int) -> list[Line]:
    return [
        Line("sampler.matmul_fraction", 100 * speed["matmul_fraction"], "%", 50.0,
             note=f"{speed['project_gflops']:.1f} of {rate['gflops_median']:.1f} GFLOP/s over generate(); "
                  f"{100 * speed['inside_forward_fraction']:.0f}% inside the forward calls"),
        Line("sampler.threshold_passes", 100 * threshold["query_forward_passes"]["saved_fraction"], "% saved", None,
             note=f"wall {100 * threshold['wall_s']['saved_fraction']:+.0f}% saved; overlap "
                  f"{threshold['mean_corpus_overlap']['diff']:+.4f}"),
        Line("sampler.speedup", speed["speedup"], "x", 3.0,
             note=f"{n / speed['project_wall']:.2f} vs {n / speed['reference_wall']:.2f} generations/s"),
    ]
