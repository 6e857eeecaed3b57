"""Snakemake script: results/tables/lm_eval.parquet -> results/figures/lm_eval.{pdf,png}."""

from anchormask.harness import results
from anchormask.measurement import tables
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    results.figure(tables.read_parquet(smk.input[0]), smk.output.pdf, smk.output.png)


main(snakemake)  # noqa: F821
