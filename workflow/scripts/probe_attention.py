"""Snakemake script: per arm, attention mass from answer positions onto prefix and anchor -> Parquet, heatmaps."""

import json
import logging

from anchormask.generation import sampler
from anchormask.measurement import tables
from anchormask.model import modeljob
from anchormask.probes import attention
from anchormask.reporting import probe_figures
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    arms = json.loads(smk.params.arms)
    settings = sampler.SamplerSettings.from_config(json.loads(smk.params.sampler))
    base = modeljob.Base.from_config(json.loads(smk.params.base))
    df = attention.attention_table(arms, list(smk.input.retrieval), base, settings, threads=smk.threads)
    tables.write_parquet(df, smk.output.table, attention.ATTENTION_SCHEMA)
    probe_figures.attention_figure(df, smk.output.pdf, smk.output.png, arm_order=json.loads(smk.params.arm_order))
    for (arm, target), mass in df.groupby(["arm", "target"], sort=False)["mass"].mean().items():
        logging.info("%s onto %s: mean mass %.4f", arm, target, mass)
    logging.info("wrote %s, %s and %s: %d arms, %d rows", smk.output.table, smk.output.pdf, smk.output.png,
                 df["arm"].nunique(), len(df))


main(snakemake)  # noqa: F821
modeljob.finish()  # skips the interpreter's teardown of torch (about 1 s a job)
