"""5. Memory: peak RSS of one training job and one generation job on the embedded base, and the
package's memory model (anchormask.model.memory; checked at the real shapes by bench/scale.py) for a 1.3B
LLaDA-style base on a GPU and for each layer of config/bases/ (the README's table and the SLURM requests).

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
                 arch: dict[str, int] = ARCH_13B, decoding: dict[str, Any] | None = None) -> dict[str, Any]:
    """GPU memory (bf16) of one LoRA training job and one generation job of a shape, from the package's
    model (anchormask.model.memory, checked at this shape on the CPU by bench/scale.py): bytes by term, in GiB."""
    from anchormask.model import memory

    shape = memory.Shape(arch["hidden"], arch["layers"], arch["heads"], arch.get("kv_heads", arch["heads"]),
                         arch["intermediate"], arch["vocab"], arch["tied_embeddings"])
    settings = {"batch": batch, "seq_len": seq_len, "rank": rank, "kinds": lora_kinds, "gen_batch": gen_batch,
                "width": seq_len + answer_len, "gen_masked": gen_batch * answer_len, "decoding": decoding}
    predicted = memory.predict(shape, settings, "cuda")

    def gib(parts: dict[str, int]) -> dict[str, float]:
        inside = {k: v for k, v in parts.items() if k not in ("total", "runtime")}
        return {f"{k}_gib": round(v / GIB, 3) for k, v in inside.items()} | {
            "total_gib": round(sum(inside.values()) / GIB, 3), "cuda_context_gib": round(parts["runtime"] / GIB, 3)}

    return {
        "architecture": arch | {"parameters": shape.parameters,
                                "lora_parameters": shape.lora_parameters(rank, lora_kinds),
                                "lora_targets": lora_kinds, "rank": rank},
        "training": {"batch": batch, "seq_len": seq_len, "formula": memory.__doc__.split("Terms")[1].strip(),
                     **gib(predicted["training"])},
        "generation": {"batch": gen_batch, "width_upper_bound": seq_len + answer_len, "answer_len": answer_len,
                       "sampler_bytes_per_logit": memory.sampler_entry_bytes(decoding), **gib(predicted["generation"])},
    }


def base_table() -> list[dict[str, Any]]:
    """The README's memory table: each layer of config/bases/ at its own settings, on a GPU (bf16) and,
    for the 1.3B shape, on the CPU (float32), from the package's model."""
    from anchormask.model import memory
    from bench import scale

    rows = []
    for name in ("llada-8b", "dream-7b", "report-1.3b"):
        _, raw, layer = scale.SHAPES[name]
        cfg, shape = scale.study_config(layer), memory.Shape.from_config(raw)
        settings = memory.job_settings(cfg)
        for device in ("cuda", "cpu") if name == "report-1.3b" else ("cuda",):
            pred = memory.predict(shape, settings, device)
            rows.append({"shape": name, "layer": layer, "device": device, "parameters": shape.parameters,
                         **{phase: round(pred[phase]["total"] / GIB, 2) for phase in ("training", "generation")},
                         "requests": {kind: memory.job_requests(cfg | {"base": {**cfg["base"], "device": device}},
                                                                kind, shape=shape) for kind in ("train", "generate")}})
    return rows


def say_table(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for row in table:
        say(f"memory: {row['shape']:<12} {row['device']:<5} training {row['training']:6.2f} GiB, generation "
            f"{row['generation']:6.2f} GiB; requests {row['requests']}")
    return table


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
    say(f"memory: 1.3B estimate on a GPU, training (B={t['batch']}, L={t['seq_len']}): weights {t['weights_gib']} + "
        f"LoRA/AdamW {t['lora_states_gib']} + activations {t['activations_gib']} + logits {t['logits_gib']} = "
        f"{t['total_gib']} GiB (N = {est['architecture']['parameters']:,}) + {t['cuda_context_gib']} CUDA context")
    say(f"memory: 1.3B estimate on a GPU, generation (batch {g['batch']}): weights {g['weights_gib']} + logits "
        f"{g['logits_gib']} + the layers' working set beyond them {g['layers_gib']} = {g['total_gib']} GiB "
        "+ CUDA context")
    table = say_table(base_table())
    payload = {
        "benchmark": "memory",
        "description": "peak RSS (getrusage RUSAGE_CHILDREN ru_maxrss) of one pipeline job each, on the embedded base",
        "jobs": {
            "imports_only": baseline,
            "training": trained | {"job": f"anchor_full_n{settings['default']['size']}_s{settings['default']['steps']}"
                                          f"_seed{settings['seeds'][0]}", "threads": settings["threads"]},
            "generation": generated | {"arm": "anchor", "threads": cfg["generation"]["threads"],
                                       "queries": sum(len(p.read_text().splitlines())
                                                      for p in retrieval.glob("*.jsonl"))},
        },
        "estimate_1p3b_gpu": est,
        "bases": table,
    }
    lines = [
        Line("memory.train_rss", trained["maxrss_mib"], "MiB", None,
             note=f"imports alone {baseline['maxrss_mib']:.0f} MiB"),
        Line("memory.generate_rss", generated["maxrss_mib"], "MiB", None),
        Line("memory.est_1p3b_train", t["total_gib"], "GiB", None,
             note=f"weights {t['weights_gib']} + LoRA/AdamW {t['lora_states_gib']} + activations "
                  f"{t['activations_gib']} + logits {t['logits_gib']}, + CUDA context"),
        Line("memory.est_1p3b_generate", g["total_gib"], "GiB", None,
             note=f"weights {g['weights_gib']} + logits {g['logits_gib']} + layers beyond them {g['layers_gib']}, "
                  "+ CUDA context"),
    ]
    return payload, lines
