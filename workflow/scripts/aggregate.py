"""Snakemake script: generation JSONL + corpora -> scored generations Parquet (anchormask.measurement.tables)."""

import json
import logging

from anchormask.measurement import tables
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    corpora = tables.corpora_of(json.loads(smk.params.domains), list(smk.input.corpora))
    df = tables.generations_table(list(smk.input.generations), corpora)
    tables.write_parquet(df, smk.output[0], tables.GENERATIONS_SCHEMA)
    logging.info("wrote %s: %d generations, %d arms, %d empty continuations", smk.output[0], len(df),
                 df["arm"].nunique(), int(df["empty"].sum()))


main(snakemake)  # noqa: F821
