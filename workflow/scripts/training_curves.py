"""Snakemake script: every adapter's train_log.tsv -> results/figures/training.{pdf,png}."""

import json
import logging

from anchormask.reporting import curves
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    drawn = json.loads(smk.params.curves)
    curves.training_figure(drawn, smk.output.pdf, smk.output.png)
    logging.info("wrote %s and %s (%d adapters)", smk.output.pdf, smk.output.png, len(curves.longest_runs(drawn)))


main(snakemake)  # noqa: F821
