"""The checks a study passes when the workflow is read, before any job runs: one sequence for the
study of one base (workflow/rules/common.smk) and for each base of a run with several
(workflow/rules/bases_common.smk), so the two cannot drift apart.

Our validator runs first (its messages name the source, the key and the allowed values); then
Snakemake's, which also fills in the schema's defaults; then every data file, the config's own
masking strategies (each called once on a trial batch) and the statements' anchor lengths. The main
process alone reports, once per run, what Snakemake would not: adapters damaged after outputs were made
from them, a killed writer's temporaries (removed), anchors cut to fit.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from anchormask import data, fileio, schemas
from anchormask.settings import anchors, audit
from anchormask.settings import config as config_rules
from anchormask.settings import layers as config_layers
from anchormask.training import strategies


def command_line_config(config: dict[str, Any], config_settings) -> config_layers.ConfigLayers:
    """The config Snakemake read (config.yaml, each --configfile, --config), its --config values typed as
    the schema wants them (they arrive as strings below the top level), validated; its layers."""
    config_layers.apply_override_types(config, dict(config_settings.config or {}))
    layers = config_layers.command_line_layers(config_settings)
    config_rules.validate(config, layers.source_of)
    return layers


def check_study(config: dict[str, Any], fill_defaults: Callable[[dict, str], Any]
                ) -> tuple[list[anchors.Statement], str]:
    """One study's whole config, already validated and its base checked: the schema's defaults filled in
    (``fill_defaults``: Snakemake's ``validate``), its data files checked, a statement too long to be an
    anchor refused; returns the anchor lengths, for ``report_once``'s truncation note."""
    fill_defaults(config, str(schemas.path("config")))
    data.check_all(config)
    check_strategies(config)
    return anchors.check_anchor_lengths(config)


def check_strategies(config: dict[str, Any]) -> None:
    """Each strategy of the config's own loads, takes a batch and its params, and masks a trial batch only
    where its classes allow, before any job runs (training.strategies.check)."""
    for name, spec in (config.get("strategies") or {}).items():
        where = f"strategies.{name}.function ({spec['function']})"
        strategies.check(strategies.resolve(name, spec, where))


def report_once(studies: Sequence[tuple[str, dict[str, Any], tuple[list[anchors.Statement], str]]],
                results: str = "results") -> None:
    """Called by the main process only: damaged adapters, then a killed writer's temporaries (removed, one
    line each), then each study's truncated anchors, prefixed with its name (``""`` for a single study)."""
    sys.stderr.write(audit.format_damaged(audit.damaged_adapters()))
    fileio.sweep_temporaries(results)
    for prefix, config, anchor_lengths in studies:
        truncated = anchors.format_truncations(config, anchor_lengths)
        sys.stderr.write(f"{prefix}{truncated}" if truncated else "")
