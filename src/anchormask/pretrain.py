"""Build the embedded base: a small, deliberately undertrained masked-diffusion LM.

The text is WordNet 3.0's glosses and usage examples, as Debian's ``wordnet-base`` package
ships them (``/usr/share/wordnet/data.*``). The model is a BERT-layout bidirectional
transformer with a masked-LM head, trained from scratch with the masked-diffusion objective:
per sequence a mask ratio t ~ U(eps, 1], each non-special token masked with probability t,
and cross-entropy at the masked positions.

Two choices here come from measurements on this model, not from the papers. Each sequence is
one gloss (``[CLS] gloss [SEP]``, padded, with an attention mask) rather than a window of
packed glosses: packed windows of unrelated glosses left the model at the unigram plateau
(masked CE ~7.1 nats, the unigram entropy of the text) for 1,500+ steps, while one gloss per
sequence fell below it within 300. And the loss averages CE over the masked tokens by default
(``weighting: none``); LLaDA's ELBO weighting (sum of CE / t over the masked tokens, divided
by the number of tokens; ``weighting: inverse_t``) lets the few sequences with small t
dominate the gradient, which stalled the same way.
"""

from __future__ import annotations

import gzip
import logging
import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from anchormask import io
from anchormask.progress import Progress

log = logging.getLogger(__name__)

_GLOSS_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
_QUOTED = re.compile(r'"([^"]+)"')


def normalise(text: str) -> str:
    """Lowercase, single-spaced: the form in which texts are compared for leakage."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def wordnet_lines(wordnet_dir: str | Path) -> list[str]:
    """One line per synset gloss ("lemma: definition.") and one per quoted usage example."""
    root = Path(wordnet_dir)
    lines: list[str] = []
    for name in _GLOSS_FILES:
        path = root / name
        if not path.is_file():
            raise io.InputError(f"{path}: not found; install Debian's wordnet-base (apt-get install "
                                "wordnet-base) or set pretrain.wordnet_dir")
        for raw in path.read_text(encoding="latin-1").splitlines():
            if raw.startswith("  ") or "|" not in raw:
                continue  # licence header
            fields, gloss = raw.split("|", 1)
            lemma = fields.split()[4].replace("_", " ")
            lemma = re.sub(r"\([a-z]+\)$", "", lemma)
            definition = re.sub(r"[;\s]*;[;\s]*", "; ", _QUOTED.sub("", gloss)).strip().strip(";").strip()
            if definition:
                lines.append(f"{lemma}: {definition}.")
            lines.extend(example.strip() for example in _QUOTED.findall(gloss) if example.strip())
    return lines


def drop_leaks(lines: Iterable[str], forbidden: Iterable[str]) -> tuple[list[str], int]:
    """Remove every line that contains a forbidden statement (compared normalised)."""
    banned = [normalise(s) for s in forbidden]
    kept, dropped = [], 0
    for line in lines:
        norm = normalise(line)
        if any(b and b in norm for b in banned):
            dropped += 1
        else:
            kept.append(line)
    return kept, dropped


def read_pretrain_text(path: str | Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return fh.read().splitlines()


@dataclass(frozen=True)
class PretrainSettings:
    vocab_size: int = 8192
    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    intermediate_size: int = 512
    max_positions: int = 128
    seq_len: int = 32
    batch_size: int = 128
    steps: int = 3000
    lr: float = 2e-3
    warmup_steps: int = 200
    weight_decay: float = 0.01
    min_mask_ratio: float = 0.05
    weighting: str = "none"  # none | inverse_t
    seed: int = 0
    log_every: int = 100


def train_tokenizer(lines: list[str], vocab_size: int):
    """A lowercase WordPiece tokenizer in the Hugging Face BERT layout."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    wp = BertWordPieceTokenizer(lowercase=True, strip_accents=True)
    wp.train_from_iterator(lines, vocab_size=vocab_size, min_frequency=2, show_progress=False,
                           special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    return BertTokenizerFast(vocab=wp.get_vocab(), do_lower_case=True)


def encode_lines(lines: list[str], tokenizer, seq_len: int, min_tokens: int = 6
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """One ``[CLS] line [SEP]`` sequence per line, truncated and padded to ``seq_len``.

    Lines of fewer than ``min_tokens`` tokens (specials included) are dropped: a two-word
    gloss has no context to learn from.
    """
    enc = tokenizer(lines, add_special_tokens=True, truncation=True, max_length=seq_len,
                    padding="max_length", return_tensors="pt")
    keep = enc["attention_mask"].sum(1) >= min_tokens
    return enc["input_ids"][keep], enc["attention_mask"][keep]


def diffusion_pretrain_loss(model, batch: torch.Tensor, attention: torch.Tensor, mask_id: int,
                            special: torch.Tensor, settings: PretrainSettings,
                            generator: torch.Generator) -> torch.Tensor:
    """Masked-diffusion loss; logits are computed at the masked positions only."""
    b, n = batch.shape
    t = settings.min_mask_ratio + (1 - settings.min_mask_ratio) * torch.rand(b, 1, generator=generator)
    masked = (torch.rand(b, n, generator=generator) < t) & ~torch.isin(batch, special)
    noisy = torch.where(masked, torch.full_like(batch, mask_id), batch)
    hidden = model.bert(input_ids=noisy, attention_mask=attention).last_hidden_state
    logits = model.cls(hidden[masked])
    ce = torch.nn.functional.cross_entropy(logits, batch[masked], reduction="none")
    if settings.weighting == "inverse_t":
        return (ce / t.expand(b, n)[masked]).sum() / attention.sum()
    return ce.mean() if ce.numel() else logits.sum() * 0.0


def pretrain(lines: list[str], out_dir: str | Path, settings: PretrainSettings) -> dict:
    """Train tokenizer and model; write the checkpoint atomically; return the training record."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(settings.seed)
    with io.atomic_dir(out_dir) as tmp:
        tokenizer = train_tokenizer(lines, settings.vocab_size)
        data, attention = encode_lines(lines, tokenizer, settings.seq_len)
        log.info("pretraining text: %d lines, %d sequences of at most %d tokens", len(lines), len(data),
                 settings.seq_len)
        config = BertConfig(vocab_size=len(tokenizer), hidden_size=settings.hidden_size,
                            num_hidden_layers=settings.layers, num_attention_heads=settings.heads,
                            intermediate_size=settings.intermediate_size,
                            max_position_embeddings=settings.max_positions, type_vocab_size=1,
                            pad_token_id=tokenizer.pad_token_id)
        model = BertForMaskedLM(config)
        special = torch.tensor(tokenizer.all_special_ids)
        opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
        gen = torch.Generator().manual_seed(settings.seed)

        def lr_at(step: int) -> float:
            if step < settings.warmup_steps:
                return (step + 1) / settings.warmup_steps
            frac = (step - settings.warmup_steps) / max(1, settings.steps - settings.warmup_steps)
            return 0.5 * (1 + math.cos(math.pi * frac))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
        progress = Progress("pretrain", settings.steps, log_every=settings.log_every)
        losses: list[float] = []
        start = time.perf_counter()
        model.train()
        for step in range(settings.steps):
            idx = torch.randint(len(data), (settings.batch_size,), generator=gen)
            loss = diffusion_pretrain_loss(model, data[idx], attention[idx], tokenizer.mask_token_id, special,
                                           settings, gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            progress.update(step + 1, loss=f"{sum(losses[-50:]) / len(losses[-50:]):.3f}")
        seconds = time.perf_counter() - start
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    tail = losses[-200:]
    return {"steps": settings.steps, "final_loss_mean_last_200": sum(tail) / len(tail),
            "seconds": round(seconds, 1), "parameters": sum(p.numel() for p in model.parameters()),
            "sequences": len(data), "lines": len(lines)}


def build_base(*, wordnet_dir: str | Path, corpora: Iterable[str | Path], text_out: str | Path,
               checkpoint_out: str | Path, settings: PretrainSettings) -> dict:
    """The pretraining target: text from WordNet (held-out statements removed), then the model."""
    held_out = [rec["text"] for path in corpora for rec in io.read_jsonl(path)]
    lines, dropped = drop_leaks(wordnet_lines(wordnet_dir), held_out)
    io.write_gzip_text(text_out, "\n".join(lines) + "\n")
    record = pretrain(lines, checkpoint_out, settings)
    record["lines_dropped_as_leaks"] = dropped
    record["settings"] = settings.__dict__
    io.write_json(Path(checkpoint_out) / "pretrain_record.json", record)
    return record
