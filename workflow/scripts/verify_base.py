import json

from anchormask import runlog, verify

runlog.log_to(snakemake.log[0])
base = json.loads(snakemake.params.base)
verify.write_verified(base["path"], base["sha256"], snakemake.output[0])
