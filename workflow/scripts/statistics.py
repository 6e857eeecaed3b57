"""Snakemake script: scored generations Parquet -> paired-bootstrap statistics Parquet, one per table."""

import json
import logging
from pathlib import Path

from anchormask.checksum import file_sha256
from anchormask.measurement import tables
from anchormask.repro import provenance, runlog
from anchormask.stats import pairwise


def main(smk):
    runlog.log_to(smk.log[0])
    kind = smk.params.kind
    settings = json.loads(smk.params.settings)
    # in output order, each output's name (its file stem), per-generation metric column and query set
    specs = json.loads(smk.params.tables)
    stems = [Path(p).stem for p in smk.output]
    if [s["table"] for s in specs] != stems:
        raise ValueError(f"params.tables names {[s['table'] for s in specs]}, the outputs are {stems}")
    all_rows = tables.read_parquet(smk.input[0])
    common = {k: settings[k] for k in ("resamples", "confidence", "seed", "permutations")}
    for spec, path in zip(specs, smk.output):
        metric, df = spec["metric"], tables.of_query_set(all_rows, spec["query_set"])
        if kind == "comparisons":
            comparisons = settings["comparisons"]
            if spec["query_set"] != "main":  # a second query set covers only the held-out domains
                comparisons = pairwise.covered(df, comparisons)
            out = pairwise.run_comparisons(df, comparisons, value=metric, **common)
            schema = tables.COMPARISONS_SCHEMA
        elif kind == "sweep":
            out = pairwise.run_sweep(df, report=settings.get("sweep_report") or {}, value=metric,
                                     strategies=json.loads(smk.params.strategies), **common)
            schema = tables.SWEEP_SCHEMA
        else:
            raise ValueError(f"params.kind must be 'comparisons' or 'sweep', got {kind!r}")
        meta = {"table": kind, "metric": metric, "query_set": spec["query_set"],
                "inputs": [{"path": str(smk.input[0]), "sha256": file_sha256(smk.input[0])}],
                "settings": settings, "versions": provenance.versions()}
        tables.write_parquet(out, path, schema, metadata=meta)
        logging.info("wrote %s: %d rows of %s", path, len(out), metric)


main(snakemake)  # noqa: F821
