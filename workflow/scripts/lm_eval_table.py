"""Snakemake script: every lm-eval JSON of the stage -> results/tables/lm_eval.{md,parquet}."""

import json

from anchormask.harness import results
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    results.write_table(json.loads(smk.params.runs), list(smk.input.results), smk.output.md, smk.output.table)


main(snakemake)  # noqa: F821
