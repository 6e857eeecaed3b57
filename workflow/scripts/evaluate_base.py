"""Snakemake script: the configured base -> its quality gates (evaluation.json, summary.md)."""

import json

from anchormask import base_eval, fileio
from anchormask.embedded_base import pretrain_text
from anchormask.model import modeljob
from anchormask.reporting.markdown import base_evaluation_markdown
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    settings = json.loads(smk.params.settings)  # data, retrieval, generation and base_eval: all it reads
    validation = pretrain_text.read_lines(smk.input.validation) if smk.input.validation else None
    base = modeljob.Base.from_config(json.loads(smk.params.base))
    result = base_eval.evaluate(settings, base=base, validation_lines=validation,
                                seed=settings["base_eval"]["seed"], threads=smk.threads)
    fileio.write_json(smk.output.json, result)
    fileio.write_text(smk.output.markdown, base_evaluation_markdown(result))


main(snakemake)  # noqa: F821
modeljob.finish()  # skips the interpreter's teardown of torch (about 1 s a job)
