"""The study's configuration: validation with readable errors, and what the DAG derives from it."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from anchormask import io

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
TRAIN_KEYS = ("seq_len", "rank", "alpha", "dropout", "lr", "weight_decay", "warmup_steps", "batch_size",
              "subset", "mask_ratio", "loss", "tv_weight", "threads", "log_every", "gradient_checkpointing")


class ConfigError(ValueError):
    """config.yaml is wrong; the message names the key, what was found and what is allowed."""


def _key_path(error) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def _allowed_keys(schema: dict, root: dict) -> list[str]:
    keys = set(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        ref = part.get("$ref", "")
        target = root["$defs"][ref.rsplit("/", 1)[-1]] if ref.startswith("#/$defs/") else part
        keys |= set(target.get("properties", {}))
    return sorted(keys)


def _describe(error, root: dict) -> str:
    validator, value = error.validator, error.validator_value
    if validator == "enum":
        return f"{error.instance!r} is not allowed; allowed values: {', '.join(map(repr, value))}"
    if validator in ("additionalProperties", "unevaluatedProperties"):
        allowed = _allowed_keys(error.schema, root)
        return f"{error.message}; allowed keys here: {', '.join(allowed) or '(none)'}"
    if validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bounds = {k: error.schema[k] for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
                  if k in error.schema}
        return f"{error.instance!r} is out of range; allowed: {bounds}"
    return error.message


def validate(config: dict[str, Any], source: str = "config.yaml") -> None:
    """Raise ConfigError naming every offending key (JSON schema, then cross-key checks)."""
    import jsonschema

    schema = yaml.safe_load(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    problems = [f"{source}: {_key_path(e)}: {_describe(e, schema)}" for e in errors]
    problems += _cross_checks(config, source) if not problems else []
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def _cross_checks(config: dict[str, Any], source: str) -> list[str]:
    problems = []
    for name, spec in config["arms"].items():
        if (spec["strategy"] is None) != (spec["targets"] is None):
            problems.append(f"{source}: arms.{name}: strategy and targets must both be null (base arm) "
                            "or both be set")
    for path, settings in [("train", config["train"])] + [
            (f"train.overrides.{k}", v) for k, v in config["train"].get("overrides", {}).items()]:
        ratio = settings.get("mask_ratio")
        if ratio and ratio["low"] > ratio["high"]:
            problems.append(f"{source}: {path}.mask_ratio: low ({ratio['low']}) must not exceed high "
                            f"({ratio['high']})")
    arms = set(config["arms"])
    domains = {config["data"]["in_domain"], *config["data"]["held_out"]}
    for i, comp in enumerate(config["statistics"]["comparisons"]):
        for side in ("a", "b"):
            if comp[side] not in arms:
                problems.append(f"{source}: statistics.comparisons[{i}].{side}: unknown arm {comp[side]!r}; "
                                f"arms: {', '.join(sorted(arms))}")
        if ("split" in comp) == ("domain" in comp):
            problems.append(f"{source}: statistics.comparisons[{i}]: give exactly one of split or domain")
        if comp.get("domain") is not None and comp["domain"] not in domains:
            problems.append(f"{source}: statistics.comparisons[{i}].domain: unknown domain "
                            f"{comp['domain']!r}; domains: {', '.join(sorted(domains))}")
    return problems


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    validate(config, str(path))
    return config


def train_settings(config: dict[str, Any], strategy: str) -> dict[str, Any]:
    """The training settings of one strategy: the defaults with its overrides applied."""
    settings = {k: copy.deepcopy(config["train"][k]) for k in TRAIN_KEYS if k in config["train"]}
    settings.update(copy.deepcopy(config["train"].get("overrides", {}).get(strategy, {})))
    return dict(sorted(settings.items()))


@dataclass(frozen=True, order=True)
class AdapterJob:
    strategy: str
    targets: str
    size: int
    steps: int
    seed: int

    @property
    def id(self) -> str:
        return f"{self.strategy}_{self.targets}_n{self.size}_s{self.steps}_seed{self.seed}"

    @property
    def path(self) -> str:
        return f"results/adapters/{self.id}"


def arm_adapters(config: dict[str, Any], arm: str) -> list[AdapterJob]:
    """The adapters one generation arm uses: one per training seed; none for the base arm."""
    spec = config["arms"][arm]
    if spec["strategy"] is None:
        return []
    size, steps = config["train"]["default"]["size"], config["train"]["default"]["steps"]
    return [AdapterJob(spec["strategy"], spec["targets"], size, steps, s) for s in config["train"]["seeds"]]


def sweep_points(config: dict[str, Any]) -> list[tuple[str, int, int]]:
    sweep = config["sweep"]
    return [(st, n, k) for st in sweep["strategies"] for n in sweep["sizes"] for k in sweep["steps"]]


def sweep_adapters(config: dict[str, Any], strategy: str, size: int, steps: int) -> list[AdapterJob]:
    seeds = config["sweep"].get("seeds") or config["train"]["seeds"]
    return [AdapterJob(strategy, "full", size, steps, s) for s in seeds]


def all_adapter_jobs(config: dict[str, Any]) -> list[AdapterJob]:
    jobs = {job for arm in config["arms"] for job in arm_adapters(config, arm)}
    jobs |= {job for point in sweep_points(config) for job in sweep_adapters(config, *point)}
    return sorted(jobs)


def domains(config: dict[str, Any]) -> list[str]:
    return [config["data"]["in_domain"], *config["data"]["held_out"]]


def query_sets(config: dict[str, Any]) -> dict[str, list[str]]:
    """Query set -> its domains: ``main`` covers every domain, ``alt`` (when configured) the held-out ones."""
    sets = {"main": domains(config)}
    if config["data"].get("alt_queries_dir"):
        sets["alt"] = list(config["data"]["held_out"])
    return sets


def split_of(config: dict[str, Any], domain: str) -> str:
    return "in_domain" if domain == config["data"]["in_domain"] else "held_out"


def settings_json(settings: dict[str, Any]) -> str:
    """Params travel as canonical JSON text: Snakemake compares params by repr."""
    return io.canonical_json(settings)
