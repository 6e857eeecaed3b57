"""Tiny random-weight checkpoints of every family the pipeline supports, built in a test's temp dir.

LLaDA- and Dream-style checkpoints carry the tests' own modelling code (tests/remote_code/) and
an ``auto_map``, so they load through ``trust_remote_code`` exactly as the real ones do, with
the real ids: LLaDA mask 126336 in a 126464-token vocabulary, pad == eos, a fast tokenizer with
no mask token; Dream mask 151666, pad == eos, a slow tokenizer loaded through its own auto_map.
Each tokenizer carries a chat template that writes the token sequence of the real Instruct
checkpoint's (LLaDA-8B-Instruct: Llama-3-style headers and <|eot_id|>; Dream: Qwen's <|im_start|>
turns with the default system turn), with those special tokens at the real ids.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import shutil
import sys
from pathlib import Path

from helpers import WORDS, build_tiny_model

REMOTE_CODE = Path(__file__).resolve().parent / "remote_code"
LLADA = {"bos": 126080, "eos": 126081, "mask": 126336, "vocab": 126464,
         "start_header": 126346, "end_header": 126347, "eot": 126348}
DREAM = {"bos": 151665, "eos": 151643, "mask": 151666, "vocab": 152064, "im_start": 151644, "im_end": 151645}
# Written for the tests from the token sequences the real Instruct templates produce for one user turn.
LLADA_CHAT = ("{% for m in messages %}{% if loop.first %}{{ bos_token }}{% endif %}"
              "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + (m['content'] | trim) + '<|eot_id|>' }}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
              "{% endif %}")
DREAM_CHAT = ("{% if messages[0]['role'] != 'system' %}"
              "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
              "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
              "{% endfor %}"
              "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CHAT_WORDS = ("user", "assistant", "system", "you", "are", "helpful")
FAMILIES = ("bert", "roberta", "distilbert", "electra", "llada", "dream")
REMOTE = ("llada", "dream")


def _word_vocab(extra: dict[str, int]) -> dict[str, int]:
    vocab = {"<unk>": 0, "\n": 1, **{w: i + 2 for i, w in enumerate([*WORDS, *CHAT_WORDS])}}
    return vocab | extra


def _remote_classes(name: str, module: str):
    """Import the tests' modelling code as the package ``remote_code.<name>`` (relative imports work)."""
    sys.path.insert(0, str(REMOTE_CODE.parent))
    try:
        return importlib.import_module(f"remote_code.{name}.{module}")
    finally:
        sys.path.remove(str(REMOTE_CODE.parent))


@contextlib.contextmanager
def _default_rope():
    """Give transformers 5's ROPE_INIT_FUNCTIONS its old "default" entry while the test builds
    random Dream weights (loading through from_pretrained must still meet the real failure)."""
    from transformers import modeling_rope_utils as rope

    added = "default" not in rope.ROPE_INIT_FUNCTIONS
    if added:
        def default(config, device=None, **_):
            import torch

            dim = config.hidden_size // config.num_attention_heads
            inv = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
            return inv, 1.0
        rope.ROPE_INIT_FUNCTIONS["default"] = default
    try:
        yield
    finally:
        if added:
            del rope.ROPE_INIT_FUNCTIONS["default"]


def _save_weights(model, path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"),
              metadata={"format": "pt"})


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def build_llada(path: Path, *, mask_in_config: bool = True, seed: int = 0) -> Path:
    import torch
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    for src in (REMOTE_CODE / "llada").glob("*.py"):
        shutil.copy(src, path / src.name)
    config = {"model_type": "llada", "architectures": ["LLaDAModelLM"], "d_model": 32, "n_heads": 2,
              "n_layers": 2, "mlp_hidden_size": 64, "vocab_size": LLADA["vocab"], "embedding_size": LLADA["vocab"],
              "max_sequence_length": 256, "rope_theta": 10000.0, "weight_tying": False,
              "bos_token_id": LLADA["bos"], "eos_token_id": LLADA["eos"], "pad_token_id": LLADA["eos"],
              "torch_dtype": "bfloat16",
              "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig",
                           "AutoModel": "modeling_llada.LLaDAModelLM"}}
    if mask_in_config:
        config["mask_token_id"] = LLADA["mask"]
    _write_json(path / "config.json", config)
    cfg_mod, model_mod = _remote_classes("llada", "configuration_llada"), _remote_classes("llada", "modeling_llada")
    torch.manual_seed(seed)
    model = model_mod.LLaDAModelLM(cfg_mod.LLaDAConfig(**{k: v for k, v in config.items() if k != "auto_map"}))
    model.apply(model._init_weights)
    _save_weights(model, path)
    specials = {"<|startoftext|>": LLADA["bos"], "<|endoftext|>": LLADA["eos"], "<|mdm_mask|>": LLADA["mask"],
                "<|start_header_id|>": LLADA["start_header"], "<|end_header_id|>": LLADA["end_header"],
                "<|eot_id|>": LLADA["eot"]}
    backend = Tokenizer(models.WordLevel(_word_vocab(specials), unk_token="<unk>"))
    # Words, punctuation and the newline each a token; spaces dropped (a byte-level BPE keeps "\n" too).
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(" ", "removed"),
                                                     pre_tokenizers.Split(Regex(r"\n|[^\w\s]"), "isolated")])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|startoftext|>", eos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>", unk_token="<unk>", chat_template=LLADA_CHAT,
                                  additional_special_tokens=["<|mdm_mask|>", "<|start_header_id|>",
                                                             "<|end_header_id|>", "<|eot_id|>"])
    tok.save_pretrained(path)
    return path


def build_dream(path: Path, *, seed: int = 0) -> Path:
    import torch

    path.mkdir(parents=True, exist_ok=True)
    for src in (REMOTE_CODE / "dream").glob("*.py"):
        shutil.copy(src, path / src.name)
    config = {"model_type": "Dream", "architectures": ["DreamModel"], "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "max_position_embeddings": 256, "rope_theta": 10000.0, "rope_scaling": None, "rms_norm_eps": 1e-6,
              "vocab_size": DREAM["vocab"], "mask_token_id": DREAM["mask"], "bos_token_id": DREAM["bos"],
              "eos_token_id": DREAM["eos"], "pad_token_id": DREAM["eos"], "tie_word_embeddings": False,
              "torch_dtype": "bfloat16",
              "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"}}
    _write_json(path / "config.json", config)
    cfg_mod, model_mod = _remote_classes("dream", "configuration_dream"), _remote_classes("dream", "modeling_dream")
    torch.manual_seed(seed)
    with _default_rope():
        model = model_mod.DreamModel(cfg_mod.DreamConfig(**{k: v for k, v in config.items() if k != "auto_map"}))
    _save_weights(model, path)
    specials = {"<|endoftext|>": DREAM["eos"], "<|beginoftext|>": DREAM["bos"], "<|mask|>": DREAM["mask"],
                "<|im_start|>": DREAM["im_start"], "<|im_end|>": DREAM["im_end"]}
    _write_json(path / "vocab.json", _word_vocab(specials))
    _write_json(path / "tokenizer_config.json", {
        "tokenizer_class": "DreamTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
        "bos_token": "<|beginoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "mask_token": "<|mask|>", "unk_token": "<unk>", "chat_template": DREAM_CHAT,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    return path


def _build_hf_masked_lm(path: Path, seed: int, model_class: str, config_class: str, **config) -> Path:
    """A tiny transformers masked LM of one family, with the BERT test tokenizer."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(build_tiny_model(path.with_name(path.name + "-tok")))
    torch.manual_seed(seed)
    model_cls, config_cls = getattr(transformers, model_class), getattr(transformers, config_class)
    model_cls(config_cls(vocab_size=len(tok), pad_token_id=0, **config)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def build_roberta(path: Path, seed: int = 0) -> Path:
    return _build_hf_masked_lm(path, seed, "RobertaForMaskedLM", "RobertaConfig", hidden_size=32,
                               num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=130, type_vocab_size=1)


def build_distilbert(path: Path, seed: int = 0) -> Path:
    return _build_hf_masked_lm(path, seed, "DistilBertForMaskedLM", "DistilBertConfig", dim=32, n_layers=2,
                               n_heads=2, hidden_dim=64, max_position_embeddings=128)


def build_electra(path: Path, seed: int = 0) -> Path:
    """An ELECTRA generator whose embedding width (16) differs from its hidden width (32)."""
    return _build_hf_masked_lm(path, seed, "ElectraForMaskedLM", "ElectraConfig", embedding_size=16,
                               hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=128)


BUILDERS = {"bert": lambda p: build_tiny_model(p, hidden=32), "roberta": build_roberta,
            "distilbert": build_distilbert, "electra": build_electra, "llada": build_llada, "dream": build_dream}


def remote_code_runs() -> bool:
    """Whether this environment's transformers runs LLaDA/Dream-era remote code (4.x)."""
    import transformers

    return int(transformers.__version__.split(".")[0]) < 5
