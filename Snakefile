# anchormask: anchor-token masking study for masked-diffusion LMs.
# DAG: verify base -> LoRA training jobs -> locked-anchor generations -> Parquet -> bootstrap
# statistics -> figures, tables and probes. See README.md.

from snakemake.utils import min_version

min_version("9.0")

from anchormask.cmdline import check_configfiles
from anchormask.config import yaml_file

# A target written after --configfile without `=` is read as a config file; when it exists and parses
# (a JSON output), say so before the config checks blame its keys. `anchormask run` checks more.
check_configfiles(workflow.config_settings.configfiles)

# Snakemake's own message for a YAML syntax error names neither the line nor the problem.
yaml_file("config.yaml")


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
wildcard_constraints:
    strategy="|".join(study.STRATEGIES),
    targets="|".join(study.TARGETS),
    size=r"[0-9]+",
    steps=r"[0-9]+",
    seed=r"[0-9]+",
    domain="|".join(DOMAINS),
    query_set="|".join(QUERY_SETS),
    arm="|".join(ARMS),
    figure="|".join(FIGURES),


include: "workflow/rules/base.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/generate.smk"
include: "workflow/rules/analyze.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/probes.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        default_targets(),


# After every rule is defined: each rule's `code` param is its own script's import-closure digest.
check_code_params()
