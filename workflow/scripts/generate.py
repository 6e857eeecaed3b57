"""Snakemake script: the base (+ an arm's adapters) and the retrieved queries -> generation JSONL."""

import json

from anchormask.generation import arm_answers, sampler
from anchormask.model import modeljob
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    arm = json.loads(smk.params.arm)
    spec = json.loads(smk.params.sampler)
    arm_answers.run_arm(arm=arm["arm"], strategy=arm["strategy"], targets=arm["targets"],
                       adapters=list(smk.input.adapters), retrieval_files=list(smk.input.retrieval),
                       out=smk.output[0], base=modeljob.Base.from_config(json.loads(smk.params.base)),
                       settings=sampler.SamplerSettings.from_config(spec), threads=smk.threads)


main(snakemake)  # noqa: F821
modeljob.finish()  # skips the interpreter's teardown of torch (about 1 s a job)
