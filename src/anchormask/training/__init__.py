"""LoRA training of the base under a masking strategy.

* ``strategies``: the masking strategies' contract, the built-in ones, loading and checking a user's.
* ``masking``: the mask-ratio draw, the built-ins' Bernoulli mask and the training losses.
* ``train``: one training job (strategy, LoRA targets, data size, steps, seed).
* ``resume``: continuing a run where a shorter adapter of the same run stopped.
"""
