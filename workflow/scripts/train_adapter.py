import json

from anchormask import runlog, study, train

runlog.log_to(snakemake.log[0])
wc = snakemake.wildcards
base = json.loads(snakemake.params.base)
job = study.AdapterJob(wc.strategy, wc.targets, int(wc.size), int(wc.steps), int(wc.seed))
train.train(base["path"], base["sha256"], snakemake.input.pairs, job, json.loads(snakemake.params.settings),
            snakemake.output[0], trust_remote_code=base["trust_remote_code"], device=base["device"],
            family=base.get("family"), projections=base.get("projections"), layout=base.get("layout"))
