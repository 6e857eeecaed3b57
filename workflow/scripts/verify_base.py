"""Snakemake script: the base's checkpoint folder -> results/base/verified.json once its hash matches."""

import json

from anchormask.model import verify
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    base = json.loads(smk.params.base)
    verify.write_verified(base["path"], base["sha256"], smk.output[0], verify.keys_from_environment(smk.output[0]))


main(snakemake)  # noqa: F821
