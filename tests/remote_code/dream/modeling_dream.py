"""A tiny Dream-style masked-diffusion LM, written for the tests (not Dream's code).

Interface facts it reproduces: ``DreamModel`` with ``model`` (``embed_tokens``, ``layers`` with
``self_attn.q_proj/k_proj/v_proj/o_proj``, ``norm``) and ``lm_head``; a Qwen2-style decoder
adapted to diffusion, so position i's logits predict token i+1 (the caller shifts); attention
through torch's scaled_dot_product_attention, with ``attention_mask`` handed to it as it comes
(a 2-D integer padding mask makes SDPA fail); rotary embeddings looked up as
``ROPE_INIT_FUNCTIONS["default"]``, which transformers 5 no longer has.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .configuration_dream import DreamConfig


class DreamRMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class DreamRotary(nn.Module):
    def __init__(self, config):
        super().__init__()
        rope_type = (config.rope_scaling or {}).get("rope_type", "default")
        inv_freq, self.scaling = ROPE_INIT_FUNCTIONS[rope_type](config, None)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, positions):
        angles = positions[:, None].float() * self.inv_freq[None, :].float()
        emb = torch.cat([angles, angles], dim=-1)
        return (emb.cos() * self.scaling).to(x.dtype), (emb.sin() * self.scaling).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class DreamSdpaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.hidden_size // self.heads
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, x, cos, sin, attention_mask=None):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask if isinstance(attention_mask, torch.Tensor)
                                             else None, dropout_p=0.0, is_causal=False)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class DreamDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = DreamSdpaAttention(config)
        self.input_layernorm = DreamRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = DreamRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x, cos, sin, attention_mask=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attention_mask)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class DreamBaseModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DreamDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = DreamRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = DreamRotary(config)

    def forward(self, input_ids, attention_mask=None):
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(x, torch.arange(input_ids.shape[1], device=x.device))
        for layer in self.layers:
            x = layer(x, cos, sin, attention_mask)
        return self.norm(x)


class DreamModel(PreTrainedModel):
    config_class = DreamConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["DreamDecoderLayer"]
    _supports_sdpa = True

    def __init__(self, config):
        super().__init__(config)
        self.model = DreamBaseModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, 0.02)
            if getattr(module, "bias", None) is not None:
                module.bias.data.zero_()

    def forward(self, input_ids=None, attention_mask=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        return MaskedLMOutput(logits=self.lm_head(self.model(input_ids, attention_mask)))
