"""Snakemake script: scored generations Parquet -> paired-bootstrap statistics Parquet."""

import json
import logging

from anchormask import bootstrap, runlog, tables
from anchormask.checksum import file_sha256



def main(smk):
    runlog.log_to(smk.log[0])
    kind = smk.params.kind
    settings = json.loads(smk.params.settings)
    df = tables.read_parquet(smk.input[0])
    common = {"resamples": int(settings["resamples"]), "confidence": float(settings["confidence"]),
              "seed": int(settings["seed"])}
    if kind == "comparisons":
        out = bootstrap.run_comparisons(df, settings["comparisons"], **common)
        schema = tables.COMPARISONS_SCHEMA
    elif kind == "sweep":
        out = bootstrap.run_sweep(df, report=settings.get("sweep_report") or {}, **common)
        schema = tables.SWEEP_SCHEMA
    else:
        raise ValueError(f"params.kind must be 'comparisons' or 'sweep', got {kind!r}")
    meta = {"table": kind, "inputs": [{"path": str(smk.input[0]), "sha256": file_sha256(smk.input[0])}],
            "settings": settings, "versions": tables.versions()}
    tables.write_parquet(out, smk.output[0], schema, metadata=meta)
    logging.info("wrote %s: %d rows", smk.output[0], len(out))


main(snakemake)  # noqa: F821
