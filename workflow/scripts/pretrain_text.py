"""Snakemake script: Debian's dictionaries minus every study text -> the pretraining text (train, validation)."""

import json

from anchormask import fileio
from anchormask.embedded_base import pretrain_text
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    spec = json.loads(smk.params.text)
    text = pretrain_text.build_text(sources=spec["sources"], study_files=list(smk.input.study),
                                    seed=spec["seed"], validation_per_mille=spec["validation_per_mille"])
    pretrain_text.write_lines(smk.output.train, text["train"])
    pretrain_text.write_lines(smk.output.validation, text["validation"])
    fileio.write_json(smk.output.record, text["counts"])


main(snakemake)  # noqa: F821
