import json

from anchormask import io, runlog
from anchormask.embedded_base import pretrain_text

runlog.log_to(snakemake.log[0])
spec = json.loads(snakemake.params.text)
text = pretrain_text.build_text(sources=spec["sources"], study_files=list(snakemake.input.study),
                                seed=spec["seed"], validation_per_mille=spec["validation_per_mille"])
pretrain_text.write_lines(snakemake.output.train, text["train"])
pretrain_text.write_lines(snakemake.output.validation, text["validation"])
io.write_json(snakemake.output.record, text["counts"])
