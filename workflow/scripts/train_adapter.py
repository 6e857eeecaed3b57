import json

from anchormask import modeljob, runlog, study, train

runlog.log_to(snakemake.log[0])
wc = snakemake.wildcards
base = modeljob.Base.from_config(json.loads(snakemake.params.base))
job = study.AdapterJob(wc.strategy, wc.targets, int(wc.size), int(wc.steps), int(wc.seed))
train.train(base, snakemake.input.pairs, job, json.loads(snakemake.params.settings), snakemake.output[0])
