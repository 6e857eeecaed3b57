import json

from anchormask import data, io, retrieval, runlog

runlog.log_to(snakemake.log[0])
settings = json.loads(snakemake.params.settings)
queries = data.load_queries(snakemake.input.queries, settings["max_queries"])
records = retrieval.retrieve(queries, data.load_corpus(snakemake.input.corpus), **settings["retrieval"])
domain, split = snakemake.wildcards.domain, settings["split"]
io.write_jsonl(snakemake.output[0], [{"domain": domain, "split": split, **r} for r in records])
