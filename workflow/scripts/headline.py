"""Snakemake script: comparison and sweep statistics -> results/tables/headline.md."""

import json
import logging

from anchormask import io, runlog, tables



def main(smk):
    runlog.log_to(smk.log[0])
    text = tables.headline_markdown(tables.read_parquet(smk.input.comparisons), tables.read_parquet(smk.input.sweep),
                                    json.loads(smk.params.base), tables.read_parquet(smk.input.content))
    io.write_text(smk.output[0], text)
    logging.info("wrote %s", smk.output[0])


main(snakemake)  # noqa: F821
