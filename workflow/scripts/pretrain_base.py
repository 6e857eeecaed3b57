"""Snakemake script: the pretraining text + workflow/pretrain.yaml -> the embedded base's checkpoint."""

import torch

from anchormask.embedded_base import pretrain
from anchormask.repro import runlog
from anchormask.settings import config


def main(smk):
    runlog.log_to(smk.log[0])
    torch.set_num_threads(smk.threads)
    spec = config.load_pretrain(smk.input.settings)
    pretrain.build_base(train_text=smk.input.train, validation_text=smk.input.validation,
                        out_dir=smk.output.checkpoint, state_dir=smk.params.state_dir,
                        settings=pretrain.settings_from(spec["settings"]))


main(snakemake)  # noqa: F821
