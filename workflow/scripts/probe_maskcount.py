"""Snakemake script: generations with k extra masks -> mean corpus_overlap per arm and k (Parquet,
markdown, figure)."""

import json
import logging

from anchormask import io, provenance, runlog, tables
from anchormask.probes import maskcount
from anchormask.reporting import probe_figures, probe_markdown
from anchormask.checksum import file_sha256


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
    meta = {"table": "probe_maskcount", "inputs": [{"arm": a, "k": k, "path": p, "sha256": file_sha256(p)}
                                                  for (a, k), p in zip(files, paths)],
            "settings": settings, "versions": provenance.versions()}
    tables.write_parquet(summary, smk.output.table, maskcount.MASKCOUNT_SCHEMA, metadata=meta)
    io.write_text(smk.output.md, probe_markdown.maskcount_markdown(summary))
    probe_figures.maskcount_figure(summary, smk.output.pdf, smk.output.png)
    logging.info("wrote %s, %s and the figure: %d rows", smk.output.table, smk.output.md, len(summary))


main(snakemake)  # noqa: F821
