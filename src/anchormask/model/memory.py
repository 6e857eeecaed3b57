"""The memory model of one model job: what a LoRA training step and a generation step hold at their peak.

One source for the cluster requests (``job_requests``: ``model_resources`` in workflow/rules/common.smk
asks SLURM for them) and for the benchmarks (bench/memory.py writes the README's table from it;
bench/scale.py measures it at the real architectures' shapes and prints measured beside predicted).
The model needs only the base's ``config.json`` shape, never its weights.

Terms (bytes; ``b`` = bytes of the compute dtype: 2 for bf16 on a GPU, 4 for float32 on the CPU):

* weights: b N (N counted from the shape: attention with its K/V width, gated or plain MLP, the
  embedding and, when untied, the head).
* LoRA states: 16 P (float32 weights, gradients, AdamW m and v).
* training activations, per token and layer, what autograd keeps for the backward of a frozen base
  with LoRA on Q, K, V, O: both norms' inputs (float32 copies where the compute dtype is bf16), the
  normed input of the LoRA A matrices, SDPA's q, k, v and output, the reshaped output that enters O's
  LoRA, and the gated MLP's gate, its SiLU and the up projection (frozen linears save nothing). With
  activation checkpointing a recomputed layer keeps only its input, and one layer at a time holds its
  tensors again in the backward (``CHECKPOINTED_LAYERS``, ``FINE_GRAINED_KEPT``).
* training logits at the M masked positions: the head's output, cross-entropy's float32 log-softmax
  and, in the backward, its float32 gradient in and out (12 bytes per entry on the CPU; 18 with the
  bf16 output and its float32 copy on a GPU); and a small transient workspace.
* generation: the float32 logits at the masked slot positions with what the sampler derives from them
  at its peak (``sampler_entry_bytes``: 8 bytes per entry greedy, 28 with a temperature and top_p),
  or one layer's inference working set over the batch's B x W positions where that is larger (the two
  are never alive together).
* the CPU's heap: tensors under 32 MiB come from glibc's heap, which keeps what a step frees
  (modeljob.keep_freed_memory): in training as much again as the activations held in such tensors, in
  generation the layers' working set; larger tensors are unmapped when freed.
* runtime: the interpreter with torch, transformers and peft (host), or the CUDA context (GPU).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from anchormask import schemas

GIB = 1024 ** 3
MIB = 1024 ** 2
HOST_RUNTIME = int(0.37 * GIB)   # a model job's imports (torch, transformers, peft, the package, the modelling code)
STEP_WORKSPACE = 48 * MIB        # a training step's transient working memory beyond what autograd saves
MMAP_THRESHOLD = 32 * MIB        # modeljob.keep_freed_memory: smaller blocks come from glibc's heap, which keeps them
CUDA_CONTEXT = 1 * GIB           # CUDA context and cuBLAS workspace, outside torch's allocator
CUDA_HOST = int(1.5 * GIB)       # the CUDA runtime's libraries and host-side state in a GPU job's RSS
MARGIN = 1.15                    # requests: the prediction plus the tolerance bench/scale.py checks it to
MIN_HOST_MB = 4000


@dataclass(frozen=True)
class Shape:
    """The parts of an architecture that its memory depends on."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    gated: bool = True        # SwiGLU (LLaDA, Dream, Llama); False: one up projection with GELU (BERT)
    positions: int = 0        # learned position embeddings (BERT-style)

    @property
    def kv_width(self) -> int:
        return self.hidden // self.heads * self.kv_heads

    @property
    def parameters(self) -> int:
        h, f = self.hidden, self.intermediate
        attention = 2 * h * h + 2 * h * self.kv_width
        mlp = (3 if self.gated else 2) * h * f
        embeddings = self.vocab * h * (1 if self.tied else 2) + self.positions * h
        return self.layers * (attention + mlp) + embeddings

    def lora_parameters(self, rank: int, kinds: str = "qkvo") -> int:
        width = {"q": self.hidden, "k": self.kv_width, "v": self.kv_width, "o": self.hidden}
        return self.layers * sum(rank * (self.hidden + width[k]) for k in kinds)

    def record(self) -> dict[str, Any]:
        return asdict(self) | {"parameters": self.parameters}

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> "Shape":
        """The shape from a checkpoint's config.json (LLaDA's names, DistilBERT's, or the common ones)."""
        kind = str(raw.get("model_type", "")).lower()
        if "d_model" in raw:  # LLaDA
            heads = raw["n_heads"]
            return cls(raw["d_model"], raw["n_layers"], heads, raw.get("n_kv_heads") or heads,
                       raw["mlp_hidden_size"], raw.get("embedding_size") or raw["vocab_size"],
                       bool(raw.get("weight_tying", False)))
        if kind == "distilbert":
            return cls(raw["dim"], raw["n_layers"], raw["n_heads"], raw["n_heads"], raw["hidden_dim"],
                       raw["vocab_size"], True, gated=False, positions=raw.get("max_position_embeddings", 0))
        heads = raw["num_attention_heads"]
        gated = raw.get("hidden_act", "silu") in ("silu", "swiglu") and kind not in ("bert", "roberta", "electra")
        return cls(raw["hidden_size"], raw["num_hidden_layers"], heads, raw.get("num_key_value_heads") or heads,
                   raw["intermediate_size"], raw["vocab_size"], bool(raw.get("tie_word_embeddings", not gated)),
                   gated=gated, positions=0 if gated else raw.get("max_position_embeddings", 0))

    @classmethod
    def of_checkpoint(cls, path: str | Path) -> "Shape":
        return cls.from_config(json.loads((Path(path) / "config.json").read_text()))


def _activation_bytes(shape: Shape, b: int) -> int:
    """Saved activations of one training step per token and layer (see the module's docstring)."""
    d, f = shape.hidden, shape.intermediate
    norms = 2 * 4 * d                   # both norms' inputs, float32 (a copy under bf16)
    attention = 6 * b * d               # LoRA A input; SDPA's q, k, v (K/V repeated to every head), out; O's input
    mlp = 3 * b * f if shape.gated else 2 * b * f
    return norms + attention + mlp


# Activation checkpointing (train.gradient_checkpointing): the share of the layers whose activations are
# recomputed in the backward instead of kept (LLaDA's one_in_N strategies checkpoint every Nth block), and
# for fine_grained, which checkpoints pieces inside every block, the share of a block's activations it keeps.
# Calibrated on bench/checkpointing.py's saved-activation counts (LLaDA stand-in, 8 layers, hidden 512):
# whole_layer kept 13% of no checkpointing, one_in_two 57%, fine_grained 60%.
CHECKPOINTED_LAYERS = {True: 1.0, "whole_layer": 1.0, "one_in_two": 1 / 2, "one_in_three": 1 / 3,
                       "one_in_four": 1 / 4}
FINE_GRAINED_KEPT = 0.6


def _saved_activations(shape: Shape, tokens: int, b: int, checkpointing: bool | str = False) -> int:
    """What the backward holds of the layers' activations: every layer's saved tensors, or with checkpointing
    a checkpointed layer's input (tokens x hidden) plus, while one layer is recomputed, its own tensors."""
    per_layer = tokens * _activation_bytes(shape, b)
    if not checkpointing:
        return shape.layers * per_layer
    if checkpointing == "fine_grained":
        return math.ceil(shape.layers * FINE_GRAINED_KEPT * per_layer)
    checkpointed = round(shape.layers * CHECKPOINTED_LAYERS[checkpointing])
    inputs = checkpointed * tokens * b * shape.hidden
    return inputs + (shape.layers - checkpointed) * per_layer + (per_layer if checkpointed else 0)


def _heap_kept(shape: Shape, tokens: int, b: int, d_count: int, f_count: int) -> int:
    """Bytes of a CPU step's ``d_count`` tensors of tokens x hidden and ``f_count`` of tokens x intermediate
    that come from glibc's heap (each under MMAP_THRESHOLD), which keeps what the step frees
    (modeljob.keep_freed_memory); larger tensors are mapped and unmapped, and leave nothing behind."""
    def kept(count: int, width: int) -> int:
        return count * tokens * width * b if tokens * width * b < MMAP_THRESHOLD else 0
    return kept(d_count, shape.hidden) + kept(f_count, shape.intermediate)


def training(shape: Shape, *, batch: int, seq_len: int, rank: int, kinds: str = "qkvo", masked: int | None = None,
             dtype_bytes: int = 2, checkpointing: bool | str = False) -> dict[str, int]:
    """Peak bytes of one LoRA step, by term; ``masked`` defaults to its upper bound B L; ``checkpointing``
    train.gradient_checkpointing (False, True or a LLaDA strategy).

    On the CPU (float32) the heap also keeps the forward's freed temporaries between the saved activations:
    as much again as the activations held in heap-sized tensors (measured 0.7-1.2x, bench/scale.py)."""
    tokens = batch * seq_len
    masked = tokens if masked is None else masked
    logits_entry = 12 if dtype_bytes == 4 else 18
    activations = _saved_activations(shape, tokens, dtype_bytes, checkpointing)
    parts = {"weights": dtype_bytes * shape.parameters, "lora_states": 16 * shape.lora_parameters(rank, kinds),
             "activations": activations, "logits": logits_entry * masked * shape.vocab, "workspace": STEP_WORKSPACE}
    if dtype_bytes == 4:  # the saved activations' tensors per layer: 8 of tokens x hidden, 3 (2) of x intermediate
        parts["heap"] = shape.layers * _heap_kept(shape, tokens, 4, 8, 3 if shape.gated else 2)
    return parts


def sampler_entry_bytes(decoding: dict[str, Any] | None = None) -> int:
    """Peak bytes per entry of one denoising step's [M, V] float32 logits in the sampler (sampler._logits,
    _propose, _confidence: every stage's live tensors; the logits are held through the step).

    Greedy low-confidence: the logits and their softmax (8). A temperature divides into a new tensor;
    top_p sorts (values 4, int64 order 8) and takes a softmax and its cumsum (24 more at the peak); top_k
    a filtered copy; a draw adds Gumbel noise and the noisy scores; entropy scores probs, probs + eps, its
    log and their product; guidance (cfg_scale) a second logits tensor and the combination.
    """
    d = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "remasking": "low_confidence", "cfg_scale": 0.0,
         **(decoding or {})}
    logits = 4
    tempered = 4 if d["temperature"] > 0 else 0
    stages = [logits + (12 if d["cfg_scale"] > 0 else 0)]
    if d["top_p"] < 1:
        stages.append(logits + tempered + 4 + 8 + 4 + 4)
    filtered = 4 if d["top_p"] < 1 or d["top_k"] > 0 else tempered
    if d["top_k"] > 0:
        stages.append(logits + tempered + filtered + 1 + 4)
    held = logits + filtered  # the logits and the scores the proposal is drawn from
    if d["temperature"] > 0:
        stages.append(held + 8)
    score = {"low_confidence": 4 + (4 if d["temperature"] > 0 and filtered == 4 else 0), "topk_margin": 4,
             "entropy": 16}.get(d["remasking"], 0)
    stages.append(held + score)
    return max(stages)


def generation(shape: Shape, *, batch: int, width: int, masked: int | None = None, dtype_bytes: int = 2,
               decoding: dict[str, Any] | None = None) -> dict[str, int]:
    """Peak bytes of one generation step over ``batch`` sequences of ``width`` positions; ``masked``
    (positions the head runs at) defaults to the whole batch; ``decoding``: the generation block.

    The layers' working set (one layer at a time) is gone when the head's logits are made, so the two
    do not add, but on the CPU the part of it that came from the heap stays (``_heap_kept``)."""
    d, f = shape.hidden, shape.intermediate
    tokens = batch * width
    masked = tokens if masked is None else masked
    attention, mlp = 9 * d + 2 * shape.kv_width, 3 * d + (3 if shape.gated else 2) * f
    transient = tokens * dtype_bytes * max(attention, mlp)
    logits = sampler_entry_bytes(decoding) * masked * shape.vocab
    kept = 0
    if dtype_bytes == 4:
        kept = min(transient, _heap_kept(shape, tokens, dtype_bytes, 11, 3 if shape.gated else 2))
    return {"weights": dtype_bytes * shape.parameters, "heap": kept, "logits": logits,
            "layers": max(transient - kept - logits, 0)}  # peak: weights + max(layers' working set, heap + logits)


def predict(shape: Shape, settings: dict[str, Any], device: str) -> dict[str, dict[str, int]]:
    """Training, generation and loading on ``device`` (cpu: float32 in host RAM; cuda: bf16 on the GPU),
    by term, each with its ``total``; ``settings`` as :func:`job_settings` returns them."""
    b = 4 if device == "cpu" else 2
    runtime = {"runtime": HOST_RUNTIME if device == "cpu" else CUDA_CONTEXT}
    train = training(shape, batch=settings["batch"], seq_len=settings["seq_len"], rank=settings["rank"],
                     kinds=settings.get("kinds", "qkvo"), masked=settings.get("masked"), dtype_bytes=b,
                     checkpointing=settings.get("checkpointing", False)) | runtime
    gen = generation(shape, batch=settings["gen_batch"], width=settings["width"], masked=settings.get("gen_masked"),
                     dtype_bytes=b, decoding=settings.get("decoding")) | runtime
    load = {"weights": b * shape.parameters} | runtime
    return {name: parts | {"total": sum(parts.values())} for name, parts in
            (("load", load), ("training", train), ("generation", gen))}


def job_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The shapes a study's model jobs run at: the training batch and length; the generation batch, its
    widest sequence (a prompt shorter than ``train.seq_len``, the slot, the most extra masks of the arms
    and the mask-count probe) and the slot positions the first step decides (the first block)."""
    gen, train = config["generation"], config["train"]
    extra = max([schemas.setting(config, ("generation", "extra_masks")),
                 *schemas.setting(config, ("probes", "maskcount_k"))])
    slot = gen.get("block_len") or gen["answer_len"]
    decoding = {k: schemas.setting(config, ("generation", k))
                for k in ("temperature", "top_p", "top_k", "remasking", "cfg_scale")}
    micro_batch = math.ceil(train["batch_size"] / train.get("grad_accum", 1))  # what one forward holds
    return {"batch": micro_batch, "seq_len": train["seq_len"], "rank": train["rank"], "kinds": "qkvo",
            "checkpointing": train.get("gradient_checkpointing", False),
            "gen_batch": gen["batch_size"], "width": train["seq_len"] + gen["answer_len"] + extra,
            "gen_masked": gen["batch_size"] * slot, "decoding": decoding}


def _mb(x: float) -> int:
    return math.ceil(x * MARGIN / MIB)


def job_requests(config: dict[str, Any], kind: str, shape: Shape | None = None) -> dict[str, int]:
    """SLURM requests of one model job (``kind``: train | generate) of the configured base: ``mem_mb``
    (host) and ``gpu_mem_mb``, in MiB, the model's prediction plus its 15% tolerance.

    On a GPU the host holds the runtime, the CUDA libraries and, while loading, the checkpoint's bf16
    file pages; on the CPU (``device: cpu``, or ``auto`` on a node without a GPU) everything in float32.
    ``device: cpu`` asks for no GPU memory. Never under 4000 MB of host memory. ``shape``: instead of the
    one in ``base.path``'s config.json.
    """
    base = config["base"]
    shape = shape or Shape.of_checkpoint(base["path"])
    phase = "training" if kind == "train" else "generation"
    settings, device = job_settings(config), base.get("device", "auto")
    gpu = predict(shape, settings, "cuda")[phase]["total"]
    host_gpu_job = HOST_RUNTIME + CUDA_HOST + 2 * shape.parameters
    host = max(predict(shape, settings, "cpu")[phase]["total"] if device != "cuda" else 0,
               host_gpu_job if device != "cpu" else 0)
    return {"mem_mb": max(MIN_HOST_MB, _mb(host)), "gpu_mem_mb": 0 if device == "cpu" else _mb(gpu)}
