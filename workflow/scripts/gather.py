"""Snakemake script: every arm's generation JSONL -> results/generations/all.jsonl, in arm order."""

from anchormask import data
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    data.gather_generations(list(smk.input), smk.output[0])


main(snakemake)  # noqa: F821
