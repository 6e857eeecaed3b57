"""Snakemake script: one domain's queries + corpus -> each query with its retrieved statement (JSONL)."""

import json

from anchormask import fileio
from anchormask.generation import retrieval
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    settings = json.loads(smk.params.settings)
    records = retrieval.anchors(smk.input.queries, smk.input.corpus, domain=smk.wildcards.domain,
                                split=settings["split"], query_set=smk.wildcards.query_set,
                                max_queries=settings["max_queries"], settings=settings["retrieval"])
    fileio.write_jsonl(smk.output[0], records)


main(snakemake)  # noqa: F821
