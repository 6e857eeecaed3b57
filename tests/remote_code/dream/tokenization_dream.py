"""A tiny slow (pure Python) word-level tokenizer in Dream's place, written for the tests.

Like Dream's own tokenizer it is a ``PreTrainedTokenizer`` (no fast backend, so no
``sequence_ids()``) loaded through ``auto_map`` with trust_remote_code. As strict as Dream's own:
an id outside its vocabulary has no token (None), and decoding it fails in
``convert_tokens_to_string``, so a sampler that proposes such an id fails here as on Dream-7B.
"""

import json
import os
import re

from transformers import PreTrainedTokenizer


class DreamTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "vocab.json"}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file, **kwargs):
        with open(vocab_file, encoding="utf-8") as fh:
            self.encoder = json.load(fh)
        self.decoder = {i: t for t, i in self.encoder.items()}
        super().__init__(**kwargs)

    @property
    def vocab_size(self):
        return max(self.encoder.values()) + 1

    def get_vocab(self):
        return dict(self.encoder)

    def _tokenize(self, text, **kwargs):
        return re.findall(r"\n|[A-Za-z]+|[^\sA-Za-z]", text.lower())

    def _convert_token_to_id(self, token):
        return self.encoder.get(token, self.encoder["<unk>"])

    def _convert_id_to_token(self, index):
        return self.decoder.get(index)

    def convert_tokens_to_string(self, tokens):
        return " ".join(tokens)

    def save_vocabulary(self, save_directory, filename_prefix=None):
        path = os.path.join(save_directory, (filename_prefix or "") + "vocab.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.encoder, fh)
        return (path,)
