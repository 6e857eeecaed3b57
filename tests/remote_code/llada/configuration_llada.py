"""A tiny stand-in for LLaDA's configuration class, written for the tests (not LLaDA's code).

It keeps the interface facts the pipeline depends on: model_type "llada", the d_model /
n_heads / n_layers key names, a class default mask_token_id of 50256 that a loader must
never use in place of a key missing from config.json, and the activation-checkpointing
strategies (a str enum, so a plain string compares equal) that ``LLaDAModel.set_activation_checkpointing``
takes.
"""

from enum import Enum

from transformers import PretrainedConfig


class StrEnum(str, Enum):
    def __str__(self):
        return self.value


class ActivationCheckpointingStrategy(StrEnum):
    whole_layer = "whole_layer"
    one_in_two = "one_in_two"
    one_in_three = "one_in_three"
    one_in_four = "one_in_four"
    fine_grained = "fine_grained"


class LLaDAConfig(PretrainedConfig):
    model_type = "llada"

    def __init__(self, d_model=32, n_heads=2, n_layers=2, mlp_hidden_size=64, vocab_size=126464,
                 embedding_size=126464, max_sequence_length=256, rope_theta=10000.0, mask_token_id=50256,
                 weight_tying=False, **kwargs):
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.mlp_hidden_size = mlp_hidden_size
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.max_sequence_length = max_sequence_length
        self.rope_theta = rope_theta
        self.mask_token_id = mask_token_id
        self.weight_tying = weight_tying
        super().__init__(**kwargs)
