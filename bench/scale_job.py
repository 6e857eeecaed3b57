"""One measurement of the scale benchmark, in a process of its own (run under ``python -m bench._rss``).

python -m bench.scale_job SPEC_JSON
    SPEC: {"phase": load | train | generate, "dir": checkpoint folder (config.json, tokenizer, *.py),
    "weights": "random" (built in memory from config.json with the family's modelling code, uniform
    weights: nothing read from disk) | "disk" (loaded from the folder by the pipeline's loader),
    "base": the base block, "threads", "train": study.run_settings, "generation": the generation block}

The model goes through ``backbone.load_backbone`` as a job's does (tokenizer, family, special ids,
head); with ``weights: random`` only its ``load_model`` is replaced. Prints one JSON line: the phase's
wall time, the load time, the masked positions of the step, the GPU's peak allocated bytes.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from unittest import mock

import torch

REMOTE = Path(__file__).resolve().parents[1] / "tests"


def family_classes(family: str):
    """(model class, config class, context to construct in) of the tests' LLaDA/Dream-style code."""
    import contextlib

    sys.path.insert(0, str(REMOTE))
    try:
        import tiny_families as tf
    finally:
        sys.path.remove(str(REMOTE))
    if family == "llada":
        return (tf._remote_classes("llada", "modeling_llada").LLaDAModelLM,
                tf._remote_classes("llada", "configuration_llada").LLaDAConfig, contextlib.nullcontext)
    return (tf._remote_classes("dream", "modeling_dream").DreamModel,
            tf._remote_classes("dream", "configuration_dream").DreamConfig, tf._default_rope)


def random_model(raw: dict, family: str, runtime) -> torch.nn.Module:
    """The architecture of ``raw`` with uniform random weights, allocated once on the device in its dtype
    (built on the meta device: no initialisation pass, no float32 copy on the way)."""
    model_cls, config_cls, context = family_classes(family)
    config = config_cls(**{k: v for k, v in raw.items() if k != "auto_map"})
    default = torch.get_default_dtype()
    torch.set_default_dtype(runtime.dtype)
    try:
        with context(), torch.device("meta"):
            model = model_cls(config)
    finally:
        torch.set_default_dtype(default)
    fill = torch.utils.deterministic.fill_uninitialized_memory  # on under deterministic mode: NaN into every page
    torch.utils.deterministic.fill_uninitialized_memory = False  # (and into the untied head's, before the tie)
    try:
        model.to_empty(device=runtime.device)
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
    if family == "llada" and raw.get("weight_tying"):  # tied before the fill touches the head's own pages
        blocks = model.model.transformer
        blocks["ff_out"].weight = blocks["wte"].weight
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.uniform_(-1 / math.sqrt(p.shape[-1]), 1 / math.sqrt(p.shape[-1]))
            else:
                p.fill_(0.0 if name.endswith("bias") else 1.0)
        for owner in [m for m in model.modules() if hasattr(m, "inv_freq")]:  # rotary tables: not weights
            with context(), torch.device(runtime.device):
                owner.inv_freq = type(owner)(config).inv_freq
    return model.eval()


def load(spec: dict):
    from anchormask.model import backbone as bb
    from anchormask.model import modeljob

    base = modeljob.Base.from_config(spec["base"] | {"path": spec["dir"]})
    runtime = modeljob.start(base, spec["threads"])
    loader = bb.load_model
    if spec["weights"] == "random":
        def loader(path, raw, **kw):
            return random_model(raw, spec["base"]["family"], kw["runtime"])
    start = time.perf_counter()
    with mock.patch.object(bb, "load_model", loader):
        backbone = modeljob.load(base, runtime)
    return backbone, runtime, time.perf_counter() - start


def synthetic_pairs(backbone, seq_len: int, batch: int, seed: int = 0):
    """``batch`` training sequences of exactly ``seq_len`` positions (the longest the study allows), in
    the base's layout: the start token, a question of a quarter of the length, the answer, the end."""
    from anchormask.model import layout

    template = backbone.template
    g = torch.Generator().manual_seed(seed)
    start = [template.start] if template.start is not None else [backbone.tokenizer.cls_token_id]
    end = template.end if template.end is not None else backbone.tokenizer.sep_token_id
    question = seq_len // 4
    answer = seq_len - len(start) - question - 1
    pairs = []
    for _ in range(batch):
        ids = torch.randint(10, 1000, (question + answer,), generator=g).tolist()
        pairs.append(layout.EncodedPair(start + ids + [end], [layout.SPECIAL] * len(start)
                                        + [layout.QUESTION] * question + [layout.ANSWER] * answer + [layout.SPECIAL]))
    return pairs


def train_once(backbone, runtime, spec: dict) -> dict:
    from anchormask import study
    from anchormask.training import masking, strategies, train

    settings = spec["train"]
    job = study.AdapterJob("anchor", "full", settings["batch_size"], 1, 42)
    if settings.get("gradient_checkpointing"):
        train.enable_checkpointing(backbone)
    run = train.Run(backbone, job, settings, settings["batch_size"])
    batch = synthetic_pairs(backbone, settings["seq_len"], settings["batch_size"])
    start = time.perf_counter()
    loss, info = train.train_step(backbone, runtime, batch, strategies.resolve("anchor"), settings,
                                  masking.MaskRatio.from_config(settings["mask_ratio"]), run.generator)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    run.optimizer.step()
    _sync(runtime)
    return {"step_s": time.perf_counter() - start, "masked": info["masked_tokens"], "loss": float(loss.detach())}


class _OneStep(Exception):
    pass


def generate_once(backbone, runtime, spec: dict) -> dict:
    """The first denoising step of one full batch through the sampler (its widest step: every slot
    position still masked), stopped before the second."""
    import contextlib

    from anchormask.generation import sampler

    settings = sampler.SamplerSettings.from_config(spec["generation"])
    g = torch.Generator().manual_seed(1)
    prompt = spec["train"]["seq_len"]
    requests = [sampler.Request(f"q{i}", torch.randint(10, 1000, (prompt,), generator=g).tolist(),
                                torch.randint(10, 1000, (4,), generator=g).tolist())
                for i in range(settings.batch_size)]
    seen = []

    def observer(obs):
        if seen:
            raise _OneStep
        seen.append(int(obs.masked.sum()))
        return contextlib.nullcontext()

    start = time.perf_counter()
    try:
        sampler.generate(backbone, runtime, requests, settings, observer=observer)
    except _OneStep:
        pass
    _sync(runtime)
    return {"step_s": time.perf_counter() - start, "width": prompt + settings.answer_len + settings.extra_masks,
            "masked": seen[0] if seen else 0}


def _sync(runtime) -> None:
    if runtime.device.type == "cuda":
        torch.cuda.synchronize()


def main(argv: list[str]) -> int:
    from anchormask.generation import arm_answers, sampler  # noqa: F401  (what every model job imports first)

    spec = json.loads(Path(argv[0]).read_text())
    backbone, runtime, load_s = load(spec)
    out = {"phase": spec["phase"], "load_s": round(load_s, 3), "device": runtime.name,
           "parameters": sum(p.numel() for p in backbone.model.parameters()), "threads": torch.get_num_threads()}
    if spec["phase"] == "train":
        out |= train_once(backbone, runtime, spec)
    elif spec["phase"] == "generate":
        out |= generate_once(backbone, runtime, spec)
    if runtime.device.type == "cuda":
        out["gpu_peak_bytes"] = torch.cuda.max_memory_allocated()
    print("SCALE " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
