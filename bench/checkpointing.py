"""Activation checkpointing (train.gradient_checkpointing) on the CPU: one LoRA training step of
LLaDA-shaped models built from the tests' LLaDA stand-in (tests/remote_code/llada, LLaDA's
checkpointing interface) with each of its strategies against none, side by side in one run.

Per shape and strategy: the activation memory the step holds for its backward (the bytes of the
tensors autograd saves outside checkpointed pieces, counted with torch.autograd.graph.saved_tensors_hooks:
what a GPU's peak grows by with the batch, exact and machine-independent), the step's time, and the
largest relative difference of the LoRA gradients from the step without checkpointing (reported; that
they are equal is tests/test_checkpointing.py's to assert). The target: checkpointing every block
(whole_layer) holds at most half the activations of no checkpointing at the larger shape. Needs
transformers 4.x (LLaDA-era remote code, ``.venv-remote/bin/python -m bench --only checkpointing``);
elsewhere one line says it is skipped.
"""

from __future__ import annotations

import importlib
import sys
import time
from typing import Any

from bench import common
from bench.common import Line, say

SHAPES = {  # LLaDA's key names; "larger" is 8B's layout at a CPU's scale (hidden 4096, 32 layers there)
    "tiny": {"d_model": 32, "n_heads": 2, "n_layers": 2, "mlp_hidden_size": 64, "batch": 2, "seq": 64},
    "larger": {"d_model": 512, "n_heads": 8, "n_layers": 8, "mlp_hidden_size": 1376, "batch": 4, "seq": 256},
}
VOCAB = 4096
SETTINGS = (False, "whole_layer", "one_in_two", "fine_grained")
TARGETS = ["q_proj", "k_proj", "v_proj", "attn_out"]  # LoRA on LLaDA's attention projections
SAVED_TARGET = 2.0  # no checkpointing / whole_layer at the larger shape, at least


def llada_classes():
    sys.path.insert(0, str(common.REPO / "tests"))
    try:
        return (importlib.import_module("remote_code.llada.configuration_llada"),
                importlib.import_module("remote_code.llada.modeling_llada"))
    finally:
        sys.path.remove(str(common.REPO / "tests"))


def build(shape: dict[str, int], setting):
    import torch
    from peft import LoraConfig, get_peft_model

    from anchormask.model import checkpointing

    configuration, modeling = llada_classes()
    arch = {k: v for k, v in shape.items() if k not in ("batch", "seq")}
    torch.manual_seed(0)
    model = modeling.LLaDAModelLM(configuration.LLaDAConfig(vocab_size=VOCAB, embedding_size=VOCAB, **arch))
    model.apply(model._init_weights)
    if setting:
        checkpointing.enable(model, setting)
    torch.manual_seed(1)
    return get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=TARGETS,
                                            init_lora_weights=False))


def step(model, shape: dict[str, int]) -> dict[str, Any]:
    """One forward and backward: saved activation bytes, seconds, LoRA gradients."""
    import torch

    ids = torch.randint(0, VOCAB, (shape["batch"], shape["seq"]), generator=torch.Generator().manual_seed(2))
    saved = [0]

    def pack(tensor):
        saved[0] += tensor.numel() * tensor.element_size()
        return tensor

    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())
    loss.backward()
    seconds = time.perf_counter() - start
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return {"saved_bytes": saved[0], "seconds": seconds, "loss": float(loss), "grads": grads}


def max_relative_difference(grads, reference) -> float:
    return max(float((grads[n] - g).abs().max() / g.abs().max().clamp_min(1e-30)) for n, g in reference.items())


def run(threads: int | None = None) -> tuple[dict, list[Line]]:
    import torch
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:
        say("   skipped: the LLaDA stand-in's code needs transformers 4.x "
            "(.venv-remote/bin/python -m bench --only checkpointing)")
        return {"skipped": f"transformers {transformers.__version__}"}, []
    torch.set_num_threads(threads or 1)
    payload: dict[str, Any] = {"description": __doc__.split("\n\n")[0], "shapes": SHAPES, "vocab": VOCAB,
                               "threads": torch.get_num_threads(), "results": {}}
    lines = []
    for name, shape in SHAPES.items():
        runs = {str(s): step(build(shape, s), shape) for s in SETTINGS}
        plain = runs["False"]
        for setting, result in runs.items():
            difference = max_relative_difference(result["grads"], plain["grads"])
            payload["results"][f"{name}.{setting}"] = {
                "saved_MiB": round(result["saved_bytes"] / 2**20, 3), "seconds": round(result["seconds"], 4),
                "loss": result["loss"], "grad_max_rel_diff": difference}
            say(f"   {name} {setting}: activations {result['saved_bytes'] / 2**20:.2f} MiB, "
                f"{result['seconds'] * 1e3:.0f} ms, gradients within {difference:.1e} of none")
            if setting != "False":
                # equal gradients are asserted by tests/test_checkpointing.py, not judged here
                lines.append(Line(f"checkpointing.{name}.{setting}.grad", difference, "rel",
                                  note="largest relative LoRA-gradient difference from none"))
        ratio = plain["saved_bytes"] / runs["whole_layer"]["saved_bytes"]
        lines.append(Line(f"checkpointing.{name}.saved_ratio", ratio, "x", SAVED_TARGET if name == "larger" else None,
                          note=f"activations without / with whole_layer ({plain['seconds'] * 1e3:.0f} ms vs "
                               f"{runs['whole_layer']['seconds'] * 1e3:.0f} ms a step)"))
    return payload, lines
