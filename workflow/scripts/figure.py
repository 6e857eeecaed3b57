"""Snakemake script: one figure (params.which = main | sweep | ablation) as PDF and PNG."""

import json
import logging

from anchormask.measurement import tables
from anchormask.reporting import figures
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    which = smk.params.which
    # params.settings (canonical JSON {resamples, confidence, seed}: config statistics) for the per-arm CIs;
    # the seed has no default
    settings = json.loads(smk.params.settings)
    ci = {k: settings[k] for k in ("resamples", "confidence", "seed") if k in settings}
    df = tables.read_parquet(smk.input[0])
    # main and ablation read the generations table, drawn for the main query set; the sweep statistics
    # have no query sets
    if which == "main":
        figures.main_figure(tables.of_query_set(df), smk.output.pdf, smk.output.png,
                            arm_order=json.loads(smk.params.arm_order), **ci)
    elif which == "ablation":
        figures.ablation_figure(tables.of_query_set(df), smk.output.pdf, smk.output.png, **ci)
    elif which == "sweep":
        figures.sweep_figure(df, smk.output.pdf, smk.output.png, strategies=json.loads(smk.params.sweep_strategies))
    else:
        raise ValueError(f"params.which must be main, sweep or ablation, got {which!r}")
    logging.info("wrote %s and %s", smk.output.pdf, smk.output.png)


main(snakemake)  # noqa: F821
