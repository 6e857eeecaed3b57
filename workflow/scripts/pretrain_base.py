import torch
import yaml

from anchormask import runlog
from anchormask.embedded_base import pretrain

runlog.log_to(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
spec = yaml.safe_load(open(snakemake.input.settings))
pretrain.build_base(train_text=snakemake.input.train, validation_text=snakemake.input.validation,
                    out_dir=snakemake.output.checkpoint, state_dir=snakemake.params.state_dir,
                    settings=pretrain.settings_from(spec["settings"]))
