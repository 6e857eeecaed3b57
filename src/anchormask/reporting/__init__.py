"""Presentation: every figure, markdown page and HTML fragment the study writes, from its tables.

* ``style``: how every figure looks and is saved (byte-stable PDF and PNG).
* ``figures``: the study's figures (main, sweep, ablation).
* ``curves``: the training curves (every adapter's loss and mask ratio per step).
* ``probe_figures``: the probes' figures (attention heatmaps, LoRA allocation, mask count).
* ``markdown``: table cells and the headline tables (results/tables/headline.md), the base evaluation.
* ``probe_markdown``: the mask-count table and the probes' summary (results/probes/summary.md).
* ``samples``: results/tables/samples.md, each arm's text beside its numbers.
* ``paper``: the study on one page for ``snakemake --report``.
* ``arms``: the order in which arms are shown, which arm is the base, which cell is missing.
* ``bases``: the table, figure and page that compare several bases.

The numbers come from ``anchormask.measurement.tables``, ``anchormask.stats.bootstrap`` and ``anchormask.probes``;
nothing here computes a statistic that is not shown.
"""
