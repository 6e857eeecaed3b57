import json

from anchormask import io, modeljob, runlog
from anchormask.embedded_base import base_eval, pretrain_text
from anchormask.reporting.markdown import base_evaluation_markdown

runlog.log_to(snakemake.log[0])
config = {**snakemake.config, **json.loads(snakemake.params.settings)}
validation = pretrain_text.read_lines(snakemake.input.validation) if snakemake.input.validation else None
base = modeljob.Base.from_config(json.loads(snakemake.params.base))
result = base_eval.evaluate(config, base=base, validation_lines=validation,
                            seed=config["base_eval"]["seed"], threads=snakemake.threads)
io.write_json(snakemake.output.json, result)
io.write_text(snakemake.output.markdown, base_evaluation_markdown(result))
