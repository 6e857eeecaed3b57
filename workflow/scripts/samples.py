"""Snakemake script: generations JSONL + scored table -> results/tables/samples.md (anchormask.reporting.samples)."""

import json
import logging

from anchormask import fileio
from anchormask.checksum import file_sha256
from anchormask.measurement import tables
from anchormask.reporting import samples
from anchormask.repro import provenance, runlog


def main(smk):
    runlog.log_to(smk.log[0])
    settings = json.loads(smk.params.settings)
    table = tables.of_query_set(tables.read_parquet(smk.input.table))
    text = samples.samples_markdown(fileio.read_jsonl(smk.input.generations), table,
                                    settings["arms"], settings["domains"], settings["per_domain"])
    inputs = [f"`{p}` (sha256 `{file_sha256(p)}`)" for p in (smk.input.generations, smk.input.table)]
    text += f"\nSources: {', '.join(inputs)}; anchormask {provenance.versions()['anchormask']}.\n"
    fileio.write_text(smk.output[0], text)
    logging.info("wrote %s", smk.output[0])


main(snakemake)  # noqa: F821
