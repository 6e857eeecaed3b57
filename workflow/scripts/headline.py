"""Snakemake script: comparison and sweep statistics -> results/tables/headline.md."""

import json
import logging
import sys

from anchormask import io, tables


def _logging(path):
    handlers = [logging.FileHandler(path, mode="w"), logging.StreamHandler(sys.stderr)]
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def main(smk):
    _logging(smk.log[0])
    text = tables.headline_markdown(tables.read_parquet(smk.input.comparisons), tables.read_parquet(smk.input.sweep),
                                    json.loads(smk.params.base))
    io.write_text(smk.output[0], text)
    logging.info("wrote %s", smk.output[0])


main(snakemake)  # noqa: F821
