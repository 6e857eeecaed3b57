"""Snakemake script: scored generations Parquet -> paired-bootstrap statistics Parquet, one per metric.

``params.metrics`` names the per-generation column of each output, in output order.
"""

import json
import logging

from anchormask import bootstrap, runlog, tables
from anchormask.checksum import file_sha256



def main(smk):
    runlog.log_to(smk.log[0])
    kind = smk.params.kind
    settings = json.loads(smk.params.settings)
    metrics = json.loads(smk.params.metrics)
    if len(metrics) != len(smk.output):
        raise ValueError(f"params.metrics names {len(metrics)} metrics for {len(smk.output)} outputs")
    df = tables.read_parquet(smk.input[0])
    common = {k: settings[k] for k in ("resamples", "confidence", "seed", "permutations")}
    for metric, path in zip(metrics, smk.output):
        if kind == "comparisons":
            out = bootstrap.run_comparisons(df, settings["comparisons"], value=metric, **common)
            schema = tables.COMPARISONS_SCHEMA
        elif kind == "sweep":
            out = bootstrap.run_sweep(df, report=settings.get("sweep_report") or {}, value=metric, **common)
            schema = tables.SWEEP_SCHEMA
        else:
            raise ValueError(f"params.kind must be 'comparisons' or 'sweep', got {kind!r}")
        meta = {"table": kind, "metric": metric,
                "inputs": [{"path": str(smk.input[0]), "sha256": file_sha256(smk.input[0])}],
                "settings": settings, "versions": tables.versions()}
        tables.write_parquet(out, path, schema, metadata=meta)
        logging.info("wrote %s: %d rows of %s", path, len(out), metric)


main(snakemake)  # noqa: F821
