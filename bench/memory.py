"""5. Memory: peak RSS of one training job and one generation job on the embedded base, and an
estimate for a 1.3B LLaDA-style base on a GPU.

Each job runs in its own launcher (``python -m bench._rss``), which reads
resource.getrusage(RUSAGE_CHILDREN).ru_maxrss after its one child exits. The jobs are the
pipeline's default anchor / full training job (train.default size and steps, first seed) and
the anchor arm's generation job over all retrieved queries with that adapter, run through
the same library calls as workflow/scripts/{train_adapter,generate}.py at the configured
threads. A third launcher runs only the imports, the baseline both jobs start from. The
trained adapter is kept for the rest of the run (the sampler benchmark's threshold check
uses it).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench import common
from bench.common import Line, say

GIB = 1024 ** 3

# The 1.3B base we size for: LLaDA-style (Llama-like blocks, SwiGLU MLP, RMSNorm, no dropout,
# multi-head attention without GQA), LLaDA's tokenizer (126,464 ids, mask 126336), tied embeddings.
ARCH_13B = {"hidden": 2048, "layers": 20, "heads": 16, "intermediate": 5632, "vocab": 126464, "tied_embeddings": True}


def launch(args: list[str], timeout: int = 1200) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(common.REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([common.python(), "-m", "bench._rss", common.python(), *args], cwd=common.REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(args)}: launcher failed\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    result = json.loads(lines[-1])
    if result["rc"] != 0:
        raise RuntimeError(f"{' '.join(args)}: job exited {result['rc']}\n{proc.stderr[-4000:]}")
    return result


def estimate_13b(*, batch: int, seq_len: int, rank: int, lora_kinds: str, answer_len: int, gen_batch: int,
                 arch: dict[str, int] = ARCH_13B) -> dict[str, Any]:
    """GPU memory of one LoRA training job and one generation job on the 1.3B base (bytes)."""
    h, layers, f, vocab = arch["hidden"], arch["layers"], arch["intermediate"], arch["vocab"]
    params = layers * (4 * h * h + 3 * h * f) + vocab * h * (1 if arch["tied_embeddings"] else 2)
    lora = layers * len(lora_kinds) * rank * (h + h)
    tokens = batch * seq_len
    weights = 2 * params
    lora_states = 16 * lora
    per_token_layer = 18 * h + 6 * f
    activations = tokens * layers * per_token_layer
    logits = 18 * tokens * vocab
    train_total = weights + lora_states + activations + logits
    gen_width = seq_len + answer_len               # prompt (< L) + answer slot, an upper bound
    gen_tokens = gen_batch * gen_width
    gen_transient = gen_tokens * (8 * h + 6 * f)   # one layer's working set at a time (inference)
    gen_masked = gen_batch * answer_len
    gen_logits_gpu = gen_masked * vocab * (2 + 4)  # bf16 head output + its float32 copy
    gen_logits_host = gen_masked * vocab * 4 * 2   # .cpu() copy + softmax over it (sampler._propose)
    gen_total = weights + gen_transient + gen_logits_gpu

    def gib(x: float) -> float:
        return round(x / GIB, 3)

    return {
        "architecture": arch | {"parameters": params, "lora_parameters": lora, "lora_targets": lora_kinds, "rank": rank},
        "training": {
            "batch": batch, "seq_len": seq_len,
            "formula": "total = 2 N  (bf16 weights)  +  16 P  (LoRA fp32 weights, grads, AdamW m and v)  "
                       "+  B L n_layers (18 d + 6 f)  (saved activations, bf16)  +  18 B L V  (logits at masked "
                       "positions, upper bound M = B L: bf16 head output 2 + fp32 copy 4 + saved log-softmax 4 "
                       "+ backward fp32 grads 8 bytes per entry)",
            "activation_terms_per_token_per_layer": "RMSNorm x2 saves fp32 input 2*4d; LoRA A input 2d; SDPA saves "
                                                    "q, k, v, out 4*2d; SwiGLU saves gate, silu(gate), up 3*2f; "
                                                    "frozen linears save nothing (no weight grad); LoRA x A (4 r "
                                                    "per module) and logsumexp ignored",
            "weights_gib": gib(weights), "lora_states_gib": gib(lora_states), "activations_gib": gib(activations),
            "logits_gib": gib(logits), "total_gib": gib(train_total),
            "plus": "CUDA context + cuBLAS workspace, ~0.5-1 GiB outside torch's allocator; if the checkpoint is "
                    "stored in float32, transformers (dtype='auto') loads float32 weights: +2 N bytes",
        },
        "generation": {
            "batch": gen_batch, "width_upper_bound": gen_width, "answer_len": answer_len,
            "formula": "total = 2 N  +  B_gen W (8 d + 6 f)  (one layer's inference working set)  +  6 B_gen G V  "
                       "(bf16 logits at the masked slot positions of the first step and their fp32 copy); host: "
                       "8 B_gen G V (the fp32 logits copied to the CPU and their softmax)",
            "weights_gib": gib(weights), "transient_gib": gib(gen_transient), "logits_gpu_gib": gib(gen_logits_gpu),
            "total_gpu_gib": gib(gen_total), "logits_host_gib": gib(gen_logits_host),
        },
    }


def run(threads: int | None = None) -> tuple[dict, list[Line]]:
    from anchormask import checksum

    cfg = common.load_config()
    work = Path(tempfile.mkdtemp(prefix="anchormask-bench-mem-"))
    common.register_cleanup(work)
    baseline = launch(["-m", "bench.jobs", "imports"])
    say(f"memory: imports only        {baseline['maxrss_mib']:8.1f} MiB ({baseline['wall_s']:.1f} s)")
    adapter = work / "adapter"
    base_sha = checksum.directory_sha256(common.base_dir(cfg))
    trained = launch(["-m", "bench.jobs", "train", str(adapter)])
    say(f"memory: training job        {trained['maxrss_mib']:8.1f} MiB ({trained['wall_s']:.1f} s)")
    if checksum.directory_sha256(common.base_dir(cfg)) == base_sha:  # not if data/base was replaced meanwhile
        common.ADAPTERS["anchor_default"] = (adapter, base_sha)
    retrieval = work / "retrieval"
    retrieval.mkdir()
    for rec in common.retrieved_queries(cfg):
        with open(retrieval / f"{rec['domain']}.jsonl", "a") as fh:
            fh.write(json.dumps(rec) + "\n")
    generated = launch(["-m", "bench.jobs", "generate", str(adapter), str(retrieval), str(work / "anchor.jsonl")])
    say(f"memory: generation job      {generated['maxrss_mib']:8.1f} MiB ({generated['wall_s']:.1f} s)")

    settings = cfg["train"]
    est = estimate_13b(batch=settings["batch_size"], seq_len=settings["seq_len"], rank=settings["rank"],
                       lora_kinds="qkvo", answer_len=cfg["generation"]["answer_len"],
                       gen_batch=cfg["generation"]["batch_size"])
    t, g = est["training"], est["generation"]
    say(f"memory: 1.3B estimate, training (B={t['batch']}, L={t['seq_len']}): {t['formula']}")
    say(f"        = {t['weights_gib']} + {t['lora_states_gib']} + {t['activations_gib']} + {t['logits_gib']} "
        f"= {t['total_gib']} GiB (N = {est['architecture']['parameters']:,}, P = {est['architecture']['lora_parameters']:,}) "
        f"+ CUDA context")
    say(f"memory: 1.3B estimate, generation (batch {g['batch']}): {g['formula']}")
    say(f"        = {g['weights_gib']} + {g['transient_gib']} + {g['logits_gpu_gib']} = {g['total_gpu_gib']} GiB on the "
        f"GPU; {g['logits_host_gib']} GiB of logits on the host")
    payload = {
        "benchmark": "memory",
        "description": "peak RSS (getrusage RUSAGE_CHILDREN ru_maxrss) of one pipeline job each, on the embedded base",
        "jobs": {
            "imports_only": baseline,
            "training": trained | {"job": f"anchor_full_n{settings['default']['size']}_s{settings['default']['steps']}"
                                          f"_seed{settings['seeds'][0]}", "threads": settings["threads"]},
            "generation": generated | {"arm": "anchor", "threads": cfg["generation"]["threads"],
                                       "queries": sum(len(p.read_text().splitlines()) for p in retrieval.glob("*.jsonl"))},
        },
        "estimate_1p3b_gpu": est,
    }
    lines = [
        Line("memory.train_rss", trained["maxrss_mib"], "MiB", None,
             note=f"imports alone {baseline['maxrss_mib']:.0f} MiB"),
        Line("memory.generate_rss", generated["maxrss_mib"], "MiB", None),
        Line("memory.est_1p3b_train", t["total_gib"], "GiB", None,
             note=f"weights {t['weights_gib']} + LoRA/AdamW {t['lora_states_gib']} + activations "
                  f"{t['activations_gib']} + logits {t['logits_gib']}, + CUDA context"),
        Line("memory.est_1p3b_generate", g["total_gpu_gib"], "GiB", None,
             note=f"+ {g['logits_host_gib']} GiB fp32 logits on the host per batch"),
    ]
    return payload, lines
