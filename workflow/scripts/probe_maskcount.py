"""Snakemake script: generations with k extra masks -> mean corpus_overlap per arm and k (Parquet, md, figure)."""

import json
import logging

from anchormask import fileio
from anchormask.measurement import tables
from anchormask.probes import maskcount
from anchormask.reporting import probe_figures, probe_markdown
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    files = json.loads(smk.params.files)
    paths = list(smk.input.generations)
    if len(files) != len(paths):
        raise ValueError(f"params.files names {len(files)} (arm, k) pairs but input.generations has {len(paths)}")
    corpora = tables.corpora_of(json.loads(smk.params.domains), list(smk.input.corpora))
    settings = json.loads(smk.params.settings)
    scored = maskcount.maskcount_generations([(arm, k, p) for (arm, k), p in zip(files, paths)], corpora)
    summary = maskcount.maskcount_summary(scored, int(settings["resamples"]), float(settings["confidence"]),
                                          int(settings["seed"]))
    tables.write_parquet(summary, smk.output.table, maskcount.MASKCOUNT_SCHEMA,
                         metadata=maskcount.summary_metadata(files, paths, settings))
    fileio.write_text(smk.output.md, probe_markdown.maskcount_markdown(summary))
    probe_figures.maskcount_figure(summary, smk.output.pdf, smk.output.png,
                                   arm_order=json.loads(smk.params.arm_order))
    logging.info("wrote %s, %s and the figure: %d rows", smk.output.table, smk.output.md, len(summary))


main(snakemake)  # noqa: F821
