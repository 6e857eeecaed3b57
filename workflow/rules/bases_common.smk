# Several bases in one run: each base's checked config, its instance of workflow/study.smk (a module),
# and the helpers of the rules across bases (bases.smk).

import sys
from pathlib import Path

from snakemake.utils import validate

from anchormask.repro import audit as study_audit
from anchormask.settings import bases as study_bases
from anchormask.settings import layers as config_layers
from anchormask.repro import codedigest
from anchormask.settings import config as study_config
from anchormask import data as study_data
from anchormask import fileio as study_io
from anchormask import schemas as study_schemas

# The config Snakemake read, with `bases:`; then each base's merged config, checked as a whole (its
# errors name the base, the layer file and the key), with the schema's defaults filled in.
config_layers.apply_override_types(config, dict(workflow.config_settings.config or {}))
CONFIG_LAYERS = config_layers.command_line_layers(workflow.config_settings)
study_config.validate(config, CONFIG_LAYERS.source_of)
BASE_STUDIES = study_bases.studies(config, CONFIG_LAYERS)
ANCHOR_LENGTHS = {}
for _base in BASE_STUDIES:
    validate(_base.config, str(study_schemas.path("config")))
    with study_bases.naming(_base):
        study_data.check_all(_base.config)
        ANCHOR_LENGTHS[_base.name] = study_data.check_anchor_lengths(_base.config)
study_bases.refuse_unloadable(BASE_STUDIES)
if workflow.is_main_process:
    sys.stderr.write(study_audit.format_damaged(study_audit.damaged_adapters()))
    study_io.sweep_temporaries("results")
    for _base in BASE_STUDIES:
        _truncated = study_data.format_truncations(_base.config, ANCHOR_LENGTHS[_base.name])
        sys.stderr.write(f"bases.{_base.name}: {_truncated}" if _truncated else "")


def base_output(base, rule):
    """The output of one base's instance of one of the study's rules, by name; one source for every path."""
    return getattr(rules, base.rule(rule)).output


def base_evaluation(base):
    """A base's evaluation JSON where its report includes one (report.base_evaluation), else None."""
    return base_output(base, "evaluate_base").json if base.config["report"]["base_evaluation"] else None


def bases_targets():
    """Every base's default target and the outputs across bases (the Snakefile's rule all)."""
    return [target for b in BASE_STUDIES for target in b.targets] + [
        *rules.compare_bases.output,
        *rules.bases_figure.output,
        *rules.bases_paper.output,
    ]
