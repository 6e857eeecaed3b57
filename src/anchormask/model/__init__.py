"""The base model: loading it, knowing its family and layout, checking it, and sizing its jobs.

* ``backbone``: weights, tokenizer, special ids, and logits only where needed.
* ``families``: what each architecture family needs, and matching a loaded model to one.
* ``layout``: how questions, answers and locked anchors become token sequences.
* ``verify``: the base checkpoint matches its pinned SHA-256 (the DAG's first node).
* ``adapters``: a trained adapter's files match the hashes its training recorded.
* ``modeljob``: what every job that runs the model sets up first.
* ``memory``: the memory model the cluster requests come from.
* ``checkpointing``: which activation-checkpointing switch a base's code has, and turning it on.
"""
