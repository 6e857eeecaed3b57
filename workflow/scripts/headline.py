"""Snakemake script: comparison and sweep statistics -> results/tables/headline.md."""

import json
import logging

from anchormask import fileio
from anchormask.measurement import tables
from anchormask.reporting import markdown
from anchormask.repro import runlog
from anchormask.stats import pairwise


def main(smk):
    runlog.log_to(smk.log[0])
    comparisons = json.loads(smk.params.comparisons)
    generations = tables.read_parquet(smk.input.generations)
    # the per-seed breakdown: point values from the generations table, no resampling
    per_seed = pairwise.per_seed(tables.of_query_set(generations), comparisons)
    alt = tables.read_parquet(smk.input.alt[0]) if smk.input.alt else None
    text = markdown.headline_markdown(tables.read_parquet(smk.input.comparisons), tables.read_parquet(smk.input.sweep),
                                      json.loads(smk.params.base), tables.read_parquet(smk.input.content), per_seed,
                                      alt, tables.anchor_truncations(generations),
                                      sweep_strategies=json.loads(smk.params.sweep_strategies))
    fileio.write_text(smk.output[0], text)
    logging.info("wrote %s", smk.output[0])


main(snakemake)  # noqa: F821
