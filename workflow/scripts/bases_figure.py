"""Snakemake script: results/tables/bases.parquet -> results/figures/bases.{pdf,png}."""

import logging

from anchormask.measurement import tables
from anchormask.reporting import bases as report_bases
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    report_bases.bases_figure(tables.read_parquet(smk.input.table), smk.output.pdf, smk.output.png)
    logging.info("wrote %s and %s", smk.output.pdf, smk.output.png)


main(snakemake)  # noqa: F821
