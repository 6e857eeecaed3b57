"""Snakemake script: generation JSONL + corpora -> scored generations Parquet (anchormask.tables)."""

import json
import logging

from anchormask import runlog, tables



def main(smk):
    runlog.log_to(smk.log[0])
    domains = json.loads(smk.params.domains)
    corpora_paths = list(smk.input.corpora)
    if len(domains) != len(corpora_paths):
        raise ValueError(f"params.domains has {len(domains)} names but input.corpora {len(corpora_paths)} files")
    df = tables.generations_table(list(smk.input.generations), dict(zip(domains, corpora_paths)))
    tables.write_parquet(df, smk.output[0], tables.GENERATIONS_SCHEMA)
    logging.info("wrote %s: %d generations, %d arms, %d empty continuations", smk.output[0], len(df),
                 df["arm"].nunique(), int(df["empty"].sum()))


main(snakemake)  # noqa: F821
