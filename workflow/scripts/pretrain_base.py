import torch
import yaml

from anchormask import pretrain, runlog

runlog.log_to(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
spec = yaml.safe_load(open(snakemake.input.settings))
pretrain.build_base(wordnet_dir=spec["wordnet_dir"], corpora=list(snakemake.input.corpora),
                    text_out=snakemake.output.text, checkpoint_out=snakemake.output.checkpoint,
                    settings=pretrain.PretrainSettings(**spec["settings"]))
