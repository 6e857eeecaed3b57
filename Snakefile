# anchormask: anchor-token masking study for masked-diffusion LMs.
# DAG: verify base -> LoRA training jobs -> locked-anchor generations -> Parquet -> bootstrap
# statistics -> figures, tables and probes. See README.md.

import sys

from snakemake.utils import min_version

min_version("9.0")

from anchormask.fileio import stops_plainly
from anchormask.settings import leftovers
from anchormask.settings.command_line import check_configfiles
from anchormask.settings.config import yaml_file

# A target written after --configfile without `=` is read as a config file; when it exists and parses
# (a JSON output), say so before the config checks blame its keys. A config file written after
# --configfile=A is read as a target: say so before the checks blame A. `anchormask run` checks more.
# Snakemake sets its targets after it has read this file, so the command line is read here.
with stops_plainly():
    check_configfiles(
        workflow.config_settings.configfiles,
        sys.argv[1:] if workflow.is_main_process else (),
    )
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


# Outputs an earlier configuration left under results/ look like this study's: name them at the end of a
# run of the default target (`anchormask audit check` lists them at any time).
onsuccess:
    sys.stderr.write(leftovers.after_run(workflow.dag.jobs, workflow.dag_settings.targets))
