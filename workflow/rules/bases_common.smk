# Several bases in one run: each base's checked config, its instance of workflow/study.smk (a module),
# and the helpers of the rules across bases (bases.smk).

from pathlib import Path

from snakemake.utils import validate

from anchormask import fileio as study_io
from anchormask.repro import codedigest
from anchormask.settings import bases as study_bases
from anchormask.settings import checks as study_checks
from anchormask.settings import config as study_config

# The config Snakemake read, with `bases:`; then each base's merged config, checked as a whole (its
# errors name the base, the layer file and the key), with the schema's defaults filled in.
# The checks of anchormask.settings.checks, as common.smk runs them for one study, here per base.
with study_io.stops_plainly():
    CONFIG_LAYERS = study_checks.command_line_config(config, workflow.config_settings)
    BASE_STUDIES = study_bases.studies(config, CONFIG_LAYERS)  # each base's merged config validated, its base checked
    ANCHOR_LENGTHS = {}
    for _base in BASE_STUDIES:
        with study_bases.naming(_base):
            ANCHOR_LENGTHS[_base.name] = study_checks.check_study(_base.config, validate)
    study_bases.refuse_unloadable(BASE_STUDIES)
    if workflow.is_main_process:
        study_checks.report_once([(f"bases.{b.name}: ", b.config, ANCHOR_LENGTHS[b.name]) for b in BASE_STUDIES])


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
