"""Snakemake script: the verified base + training pairs (+ a shorter run's state) -> one LoRA adapter and its state."""

import json

from anchormask import study
from anchormask.model import modeljob
from anchormask.repro import runlog
from anchormask.training import train


def main(smk):
    runlog.log_to(smk.log[0])
    wc = smk.wildcards
    base = modeljob.Base.from_config(json.loads(smk.params.base))
    job = study.AdapterJob(wc.strategy, wc.targets, int(wc.size), int(wc.steps), int(wc.seed))
    # The logging cadence is read from the config, not the params: the params are the adapter's identity,
    # and how often the log reports progress must not retrain it (study.TRAIN_KEYS).
    settings = study.with_log_cadence(json.loads(smk.params.settings), smk.config)
    resume_from = smk.input.resume[0] if smk.input.resume else None
    train.train(base, smk.input.pairs, job, settings, smk.output.adapter, state_out=smk.output.state,
                resume_from=resume_from)


main(snakemake)  # noqa: F821
modeljob.finish()  # skips the interpreter's teardown of torch (about 1 s a job)
