"""Snakemake script: LoRA adapters -> ||delta W||_F per kind and layer (Parquet) and the figure."""

import json
import logging

from anchormask.measurement import tables
from anchormask.probes import lora
from anchormask.reporting import probe_figures
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    adapters = json.loads(smk.params.adapters)
    layers = lora.lora_layers_table(adapters, json.loads(smk.params.projections))
    tables.write_parquet(layers, smk.output.layers, lora.LORA_LAYERS_SCHEMA)
    shares = lora.lora_share_table(layers)
    tables.write_parquet(shares, smk.output.table, lora.LORA_SCHEMA)
    probe_figures.lora_figure(layers, smk.output.pdf, smk.output.png, arm_order=json.loads(smk.params.arm_order))
    for row in shares.to_dict("records"):
        logging.info("%s %s: ||dW||_F %.4f, share %.3f", row["arm"], row["kind"], row["fro_norm"], row["share"])


main(snakemake)  # noqa: F821
