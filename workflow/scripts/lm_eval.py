"""Snakemake script: the base (+ one adapter of an arm) on one lm-eval task -> lm-eval's results as JSON."""

import json

from anchormask.generation import sampler
from anchormask.harness import evaluation
from anchormask.model import modeljob
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    evaluation.evaluate(base=modeljob.Base.from_config(json.loads(smk.params.base)),
                     settings=sampler.SamplerSettings.from_config(json.loads(smk.params.sampler)),
                     job=json.loads(smk.params.run), options=json.loads(smk.params.lm_eval), threads=smk.threads,
                     out=smk.output[0])


main(snakemake)  # noqa: F821
modeljob.finish()  # skips the interpreter's teardown of torch (about 1 s a job)
