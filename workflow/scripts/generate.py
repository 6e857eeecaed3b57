import json

from anchormask import generation, modeljob, runlog, sampler

runlog.log_to(snakemake.log[0])
arm = json.loads(snakemake.params.arm)
spec = json.loads(snakemake.params.sampler)
generation.run_arm(arm=arm["arm"], strategy=arm["strategy"], targets=arm["targets"],
                   adapters=list(snakemake.input.adapters), retrieval_files=list(snakemake.input.retrieval),
                   out=snakemake.output[0], base=modeljob.Base.from_config(json.loads(snakemake.params.base)),
                   settings=sampler.SamplerSettings.from_config(spec), threads=snakemake.threads)
