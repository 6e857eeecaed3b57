"""Matmul FLOPs of a BERT-layout masked LM, counted from its shape (multiply-add = 2 FLOPs).

Only matrix products count (linear layers, Q K^T and P V): they are >99% of the arithmetic
and what a matmul rate measures. SDPA on the CPU runs the full padded width x width score
matrix, so attention is counted over the padded width. tests/test_bench.py checks these
counts against torch.utils.flop_counter on a tiny model with eager attention.

Training with LoRA on a frozen base (the pipeline's case): the forward, then in the backward
the data gradient of every matmul whose input needs one (frozen weights get no weight
gradient) plus the weight gradients of the LoRA A and B matrices. Attention's backward is two
products per forward product. The first layer's Q/K/V inputs (the frozen embeddings) need no
gradient, so their data-gradient products are not run and not counted.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    intermediate: int
    vocab: int

    @classmethod
    def of(cls, model) -> "Shape":
        cfg = getattr(model, "config", model)
        return cls(cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.vocab_size)


def encoder_linear(shape: Shape, tokens: int) -> int:
    h, f = shape.hidden, shape.intermediate
    return 2 * tokens * (4 * h * h + 2 * h * f) * shape.layers


def encoder_attention(shape: Shape, rows: int, width: int) -> int:
    return 4 * rows * width * width * shape.hidden * shape.layers


def head(shape: Shape, positions: int) -> int:
    """Vocabulary head at ``positions`` positions: transform (h x h) then decoder (h x V)."""
    h = shape.hidden
    return 2 * positions * (h * h + h * shape.vocab)


def forward(shape: Shape, rows: int, width: int, head_positions: int) -> int:
    """One inference forward pass: the encoder over rows x width, the head at head_positions."""
    return encoder_linear(shape, rows * width) + encoder_attention(shape, rows, width) + head(shape, head_positions)


def lora_kinds_per_layer(targets: str) -> str:
    return {"full": "qkvo", "vo": "vo", "qk": "qk"}[targets]


def train_step(shape: Shape, rows: int, width: int, head_positions: int, *, rank: int, targets: str = "full") -> int:
    """Forward + backward FLOPs of one LoRA training step (see the module docstring)."""
    h, tokens = shape.hidden, rows * width
    kinds = lora_kinds_per_layer(targets)
    lin, att, hd = encoder_linear(shape, tokens), encoder_attention(shape, rows, width), head(shape, head_positions)
    lora_fwd = 2 * tokens * rank * (h + h) * len(kinds) * shape.layers   # x A, then (x A) B
    fwd = lin + att + hd + lora_fwd
    # backward: data gradients (each = its forward product), LoRA weight gradients (= LoRA forward)
    layer0_qkv = sum(1 for k in kinds if k in "qkv")  # Q/K/V LoRA of layer 0: no grad to the embeddings
    skipped = 3 * 2 * tokens * h * h + layer0_qkv * 2 * tokens * rank * h
    bwd = lin + 2 * att + hd + lora_fwd + lora_fwd - skipped
    return fwd + bwd
