"""Snakemake script: one arm's mask-count probe generations, one JSONL per extra-mask count k."""

import json

from anchormask.generation import arm_answers, sampler
from anchormask.model import modeljob
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    arm = json.loads(smk.params.arm)
    base = modeljob.Base.from_config(json.loads(smk.params.base))
    for out, spec in zip(smk.output, json.loads(smk.params.samplers), strict=True):
        arm_answers.run_arm(arm=arm["arm"], strategy=arm["strategy"], targets=arm["targets"],
                           adapters=list(smk.input.adapters), retrieval_files=list(smk.input.retrieval),
                           out=out, base=base, settings=sampler.SamplerSettings.from_config(spec),
                           threads=smk.threads)


main(snakemake)  # noqa: F821
modeljob.finish()  # skips the interpreter's teardown of torch (about 1 s a job)
