"""The log-likelihood of a continuation under a masked-diffusion LM: LLaDA's Monte-Carlo estimate.

A masked-diffusion LM has no left-to-right factorisation, so log p(continuation | context) is
bounded from below by the diffusion ELBO and estimated by sampling (LLaDA's eval_llada.py,
``get_loglikelihood``), here over the project's sequence layout (``layout.prompt_ids`` before the
continuation, no end token after it: the continuation need not end the text):

* each of ``mc_num`` samples masks ``c`` of the continuation's ``T`` tokens, chosen at random;
  within a batch of ``b`` samples the counts are stratified as LLaDA draws them: ``k`` uniform in
  1..T, then round(linspace(k, k + (b - 1) T / b, b)) wrapped into 1..T;
* a sample's score is the sum over its masked tokens of log p(token), divided by the fraction
  masked ``c / T`` (the ELBO's 1/t weight);
* the estimate is the mean over the samples. ``cfg`` > 0 scores with LLaDA's unsupervised
  classifier-free guidance, un + (cfg + 1)(cond - un), the unconditional pass with every prompt
  position masked.

Every draw comes from one CPU generator per (seed, context, continuation), so a request's estimate
does not depend on the other requests, their order or the batch size of the harness.
"""

from __future__ import annotations

import hashlib

import torch

from anchormask.model.backbone import Backbone, Runtime


def request_generator(seed: int, *texts: str) -> torch.Generator:
    """A CPU generator seeded from the seed and the request's texts."""
    digest = hashlib.sha256("\x00".join([str(seed), *texts]).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def mask_counts(target_len: int, samples: int, generator: torch.Generator) -> torch.Tensor:
    """[samples] masked-token counts in 1..target_len, stratified over the batch (LLaDA's draw)."""
    k = int(torch.randint(1, target_len + 1, (), generator=generator))
    spread = torch.round(torch.linspace(float(k), k + (samples - 1) * (target_len / samples), steps=samples)).long()
    return (spread - 1) % target_len + 1


def noisy_batch(seq: torch.Tensor, prompt_len: int, counts: torch.Tensor, mask_id: int,
                generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """([b, S] ids with counts[i] continuation tokens of row i masked, [b, S] bool: which)."""
    target_len = seq.shape[0] - prompt_len
    masked = torch.zeros((len(counts), seq.shape[0]), dtype=torch.bool)
    for row, count in enumerate(counts.tolist()):
        chosen = torch.randperm(target_len, generator=generator)[:count] + prompt_len
        masked[row, chosen] = True
    return seq.expand(len(counts), -1).masked_fill(masked, mask_id), masked


def guided_logits(backbone: Backbone, runtime: Runtime, ids: torch.Tensor, prompt_len: int, rows: torch.Tensor,
                  cols: torch.Tensor, cfg: float) -> torch.Tensor:
    """[M, V] float32 logits at (rows, cols); with cfg > 0, LLaDA's guidance against the prompt masked."""
    attention = torch.ones_like(ids, device=runtime.device)
    with torch.inference_mode(), runtime.autocast():
        logits = backbone.logits_at(ids.to(runtime.device), attention, rows, cols).float()
        if cfg > 0:
            unprompted = ids.clone()
            unprompted[:, :prompt_len] = backbone.ids.mask
            un = backbone.logits_at(unprompted.to(runtime.device), attention, rows, cols).float()
            logits = un + (cfg + 1) * (logits - un)
    return logits


def monte_carlo(backbone: Backbone, runtime: Runtime, prompt: list[int], target: list[int], *, mc_num: int,
                batch_size: int, cfg: float, generator: torch.Generator) -> float:
    """LLaDA's estimate of log p(target | prompt): the mean over mc_num samples (module docstring)."""
    if not target:
        return 0.0
    seq = torch.tensor(prompt + target, dtype=torch.long)
    scores: list[float] = []
    while len(scores) < mc_num:
        counts = mask_counts(len(target), min(batch_size, mc_num - len(scores)), generator)
        ids, masked = noisy_batch(seq, len(prompt), counts, backbone.ids.mask, generator)
        rows, cols = masked.nonzero(as_tuple=True)
        logits = guided_logits(backbone, runtime, ids, len(prompt), rows, cols, cfg)
        logp = torch.log_softmax(logits, -1).gather(1, seq[cols].to(logits.device)[:, None]).squeeze(1).cpu()
        weight = counts[rows].double() / len(target)
        scores += torch.zeros(len(counts), dtype=torch.float64).index_add_(0, rows, logp.double() / weight).tolist()
    return sum(scores) / len(scores)


def fit_prompt(prompt: list[int], room: int, start: int | None) -> list[int]:
    """The prompt cut from the left to ``room`` tokens (its first token kept when it is the start token),
    as lm-eval cuts a context that does not fit the model."""
    if len(prompt) <= room:
        return prompt
    head = prompt[:1] if start is not None and prompt[:1] == [start] else []
    return head + prompt[len(prompt) - (room - len(head)):]
