"""Mechanism probes (docs/protocol.md, "Mechanism probes"), one module per probe.

* ``attention``: attention mass from the generated-answer positions onto the question prefix and
  the locked anchor, per layer and head (probe 2).
* ``lora``: LoRA weight allocation, ``||ΔW||_F`` per projection kind and layer (probe 3).
* ``maskcount``: mask-count robustness, corpus_overlap with k extra masks (seed 002).

Probe 1 (reverse vs random) and probe 4 (the V/O ablation) are comparisons of the statistics
(``stats.pairwise.run_comparisons``); ``reporting.probe_markdown.summary_markdown`` gathers all five in
results/probes/summary.md, and ``reporting.probe_figures`` draws the probes' figures.

Tables are written through ``tables.write_parquet`` (explicit schema, canonical-JSON
provenance): the same inputs give the same bytes. Heavy imports (torch, the model code) happen
inside the functions that need them, so a job that only reads a probe's table does not load them.
"""
