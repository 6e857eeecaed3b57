"""Locked-anchor generation: the anchors, the sampler and the generation jobs.

* ``retrieval``: BM25 retrieval of the locus statement a query's answer is anchored on.
* ``sampler_settings``: the sampler's settings and the decoding options that make no sense together.
* ``sampler``: the batched reverse process, read top to bottom (batches, blocks, steps).
* ``decoding``: what one step decides: the commit schedule, guidance, filters and confidences.
* ``arm_answers``: one generation job, every query answered by one arm, as JSONL records.
"""
