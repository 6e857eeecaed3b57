"""The embedded base: how the 5.4M-parameter base in data/base was built (its quality gates are
``base_eval``, which checks any base).

* ``pretrain_text``: the pretraining text from installed Debian packages, without the study's texts.
* ``sequences``: its settings (``PretrainSettings``), tokenizer, training sequences and length buckets.
* ``pretrain``: pretraining the base, resumable, with settings from workflow/pretrain.yaml.
"""
