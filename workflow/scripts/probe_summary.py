"""Snakemake script: each probe's headline number -> results/probes/summary.md."""

import json
import logging

from anchormask import fileio
from anchormask.measurement import tables
from anchormask.reporting import probe_markdown
from anchormask.repro import runlog


def _table(smk, name):
    paths = getattr(smk.input, name, None) or []
    paths = [paths] if isinstance(paths, str) else list(paths)
    return tables.read_parquet(paths[0]) if paths else None


def main(smk):
    runlog.log_to(smk.log[0])
    text = probe_markdown.summary_markdown(_table(smk, "comparisons"), _table(smk, "attention"), _table(smk, "lora"),
                                           _table(smk, "maskcount"), json.loads(smk.params.arms),
                                           json.loads(smk.params.paths),
                                           arm_order=json.loads(smk.params.arm_order))
    fileio.write_text(smk.output[0], text)
    logging.info("wrote %s", smk.output[0])


main(snakemake)  # noqa: F821
