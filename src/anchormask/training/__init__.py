"""LoRA training of the base under a masking strategy.

* ``masking``: the masking rule of each strategy, the mask-ratio draw and the training losses.
* ``train``: one training job (strategy, LoRA targets, data size, steps, seed).
* ``resume``: continuing a run where a shorter adapter of the same run stopped.
"""
