"""The embedded base: how the 5.4M-parameter base in data/base was built and how any base is checked.

* ``pretrain_text``: the pretraining text from installed Debian packages, without the study's texts.
* ``pretrain``: pretraining the base, resumable, with settings from workflow/pretrain.yaml.
* ``base_eval``: a base's quality gates (masked-token accuracy, degeneracy of its own generations).
"""
