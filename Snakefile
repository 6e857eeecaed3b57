# anchormask: anchor-token masking study for masked-diffusion LMs.
# DAG: verify base -> LoRA training jobs -> locked-anchor generations -> Parquet -> bootstrap
# statistics -> figures, tables and probes. See README.md.

from snakemake.utils import min_version

min_version("9.0")

from anchormask.settings.command_line import check_configfiles
from anchormask.settings.config import yaml_file

# A target written after --configfile without `=` is read as a config file; when it exists and parses
# (a JSON output), say so before the config checks blame its keys. `anchormask run` checks more.
check_configfiles(workflow.config_settings.configfiles)

# Snakemake's own message for a YAML syntax error names neither the line nor the problem.
yaml_file("config.yaml")


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


# Without `bases:` the workflow is the study of config's one base (workflow/study.smk), under results/;
# with it, one instance of that study per base and the comparison across them (workflow/rules/bases.smk).
if "bases" in config:

    include: "workflow/rules/bases.smk"

    rule all:
        default_target: True
        input:
            bases_targets(),

else:

    include: "workflow/study.smk"

    rule all:
        default_target: True
        input:
            default_targets(),
