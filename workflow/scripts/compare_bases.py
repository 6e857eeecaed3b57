"""Snakemake script: every base's comparisons -> results/tables/bases.{md,parquet}, bases_differences.parquet."""

import json
import logging

from anchormask import fileio
from anchormask.checksum import file_sha256
from anchormask.measurement import tables
from anchormask.reporting import bases as report_bases
from anchormask.repro import provenance, runlog
from anchormask.stats import crossbase


def main(smk):
    runlog.log_to(smk.log[0])
    specs, settings = json.loads(smk.params.bases), json.loads(smk.params.settings)
    names = [s["name"] for s in specs]
    generations = {n: tables.read_parquet(p) for n, p in zip(names, smk.input.generations)}
    comparisons = {n: tables.read_parquet(p) for n, p in zip(names, smk.input.comparisons)}
    shared = crossbase.shared_comparisons({s["name"]: s["comparisons"] for s in specs})
    facts = [report_bases.base_facts(s["name"], s["base"],
                                     fileio.read_json(s["evaluation"]) if s["evaluation"] else None)
             for s in specs]
    table = report_bases.bases_table(facts, comparisons, shared)
    values = {c["name"]: {n: crossbase.effect_values(tables.of_query_set(generations[n]), c) for n in names}
              for c in shared}
    differences = crossbase.differences(values, **settings)
    meta = {"inputs": [{"path": str(p), "sha256": file_sha256(p)} for p in [*smk.input.generations,
                                                                             *smk.input.comparisons]],
            "bases": specs, "settings": settings, "versions": provenance.versions()}
    tables.write_parquet(table, smk.output.table, report_bases.BASES_SCHEMA, metadata=meta)
    tables.write_parquet(differences, smk.output.differences, report_bases.DIFFERENCES_SCHEMA, metadata=meta)
    fileio.write_text(smk.output.markdown, report_bases.bases_markdown(table, differences, settings))
    logging.info("%d bases, %d shared comparisons, %d differences", len(names), len(shared), len(differences))


main(snakemake)  # noqa: F821
