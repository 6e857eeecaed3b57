"""A tiny LLaDA-style masked-diffusion LM, written for the tests (not LLaDA's code).

Interface facts it reproduces: ``LLaDAModelLM.model.transformer`` holds ``wte``, ``blocks``
(each with ``q_proj``, ``k_proj``, ``v_proj``, ``attn_out`` and an MLP whose output is also
called ``ff_out``), ``ln_f`` and the vocabulary head ``ff_out``; bidirectional attention through
torch's scaled_dot_product_attention; a forward that accepts ``attention_mask`` and ignores it;
``output_attentions=True`` raises; ``__init__`` does not call ``post_init()`` (as the real code,
which is why transformers 5 fails on it with a missing ``all_tied_weights_keys``). Checkpointing as
the real code has it: ``LLaDAModelLM`` does not set ``supports_gradient_checkpointing`` (transformers'
switch refuses it), while the inner ``LLaDAModel`` has ``set_activation_checkpointing(strategy)``
(``ActivationCheckpointingStrategy``): whole_layer, one_in_two/three/four checkpoint every block,
every second, ... (non-reentrant ``torch.utils.checkpoint``); fine_grained checkpoints pieces inside
each block.
"""

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from torch.utils.checkpoint import checkpoint
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_llada import ActivationCheckpointingStrategy, LLaDAConfig

CHECKPOINT = partial(checkpoint, use_reentrant=False, preserve_rng_state=False)  # no dropout in these blocks
EVERY = {ActivationCheckpointingStrategy.whole_layer: 1, ActivationCheckpointingStrategy.one_in_two: 2,
         ActivationCheckpointingStrategy.one_in_three: 3, ActivationCheckpointingStrategy.one_in_four: 4}


class RMSNorm(nn.Module):
    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotate(x, positions, theta):
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions[:, None].float() * freqs[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


class LLaDABlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        d, hidden = config.d_model, config.mlp_hidden_size
        self.n_heads, self.theta = config.n_heads, config.rope_theta
        self.attn_norm, self.ff_norm = RMSNorm(d), RMSNorm(d)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.attn_out = nn.Linear(d, d, bias=False)
        self.ff_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.ff_out = nn.Linear(hidden, d, bias=False)
        self._activation_checkpoint_fn = None

    def set_activation_checkpointing(self, strategy):
        fine = strategy == ActivationCheckpointingStrategy.fine_grained
        self._activation_checkpoint_fn = CHECKPOINT if fine else None

    def _piece(self, function, *args):
        return function(*args) if self._activation_checkpoint_fn is None else self._activation_checkpoint_fn(
            function, *args)

    def _mlp(self, h):
        return F.silu(self.ff_proj(h)) * self.up_proj(h)

    def forward(self, x):
        b, s, d = x.shape
        h = self._piece(self.attn_norm, x)
        heads = [p(h).view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2)
                 for p in (self.q_proj, self.k_proj, self.v_proj)]
        positions = torch.arange(s, device=x.device)
        q, k = rotate(heads[0], positions, self.theta), rotate(heads[1], positions, self.theta)
        att = F.scaled_dot_product_attention(q, k, heads[2], attn_mask=None, dropout_p=0.0, is_causal=False)
        x = x + self.attn_out(att.transpose(1, 2).reshape(b, s, d))
        h = self._piece(self.ff_norm, x)
        return x + self.ff_out(self._piece(self._mlp, h))


class LLaDAModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(config.embedding_size, config.d_model),
            "blocks": nn.ModuleList(LLaDABlock(config) for _ in range(config.n_layers)),
            "ln_f": RMSNorm(config.d_model),
            "ff_out": nn.Linear(config.d_model, config.embedding_size, bias=False),
        })
        self.activation_checkpointing_strategy = None

    def set_activation_checkpointing(self, strategy):
        self.activation_checkpointing_strategy = strategy
        for block in self.transformer["blocks"]:
            block.set_activation_checkpointing(strategy)

    def _checkpointed(self, index):
        every = EVERY.get(self.activation_checkpointing_strategy)
        return every is not None and index % every == 0

    def forward(self, input_ids):
        x = self.transformer["wte"](input_ids)
        for index, block in enumerate(self.transformer["blocks"]):
            x = CHECKPOINT(block, x) if self._checkpointed(index) else block(x)
        return self.transformer["ff_out"](self.transformer["ln_f"](x))


class LLaDAModelLM(PreTrainedModel):
    config_class = LLaDAConfig
    base_model_prefix = "model"
    _no_split_modules = ["LLaDABlock"]

    def __init__(self, config):
        super().__init__(config)
        self.model = LLaDAModel(config)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, 1.0 / math.sqrt(self.config.d_model))

    def forward(self, input_ids=None, attention_mask=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        if output_attentions:
            raise ValueError("output_attentions is not yet supported in LLaDA")
        return CausalLMOutputWithPast(logits=self.model(input_ids))  # attention_mask: accepted, ignored
