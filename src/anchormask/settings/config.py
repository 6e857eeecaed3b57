"""The study's configuration: YAML reading, validation with readable errors and the base's position
limits (which source set a key, and merging layers, are in ``layers``).

What the DAG derives from a valid configuration (the training jobs, arms, sweep) is in ``anchormask.study``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from anchormask import fileio, schemas
from anchormask.generation.sampler_settings import decoding_problems
from anchormask.model import checkpointing
from anchormask.model.layout import max_positions
from anchormask.schemas import has_path, setting
from anchormask.schemas import resolve as _resolve
from anchormask.study import BUILTIN_STRATEGIES, comparison_selection, strategies, train_settings


class ConfigError(fileio.InputError):
    """The configuration is wrong; the message names its source (config.yaml, a --configfile or
    --config), the key, what was found and what is allowed."""


KeyPath = tuple  # a key path into the config: ("train", "rank"), ("data", "held_out", 0)


def dotted(path: KeyPath) -> str:
    """train.rank, statistics.comparisons.heldout_anchor_vs_random.a; "(top level)" for the empty path."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return text or "(top level)"


def _source_function(source):
    return source if callable(source) else (lambda path: source)


def _allowed_keys(schema: dict, root: dict) -> list[str]:
    keys = set(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        keys |= set(_resolve(part, root).get("properties", {}))
    return sorted(keys)


def _choices(alternatives: list[dict], root: dict) -> list[str]:
    """The allowed values of a oneOf / anyOf made of enums and null (arms.*.strategy), as written in YAML."""
    found = []
    for part in alternatives:
        part = _resolve(part, root)
        if "enum" in part:
            found += [repr(v) for v in part["enum"]]
        elif part.get("type") == "null":
            found.append("null")
        else:
            return []
    return found


_KEY_VALIDATORS = ("additionalProperties", "unevaluatedProperties")


def _unknown_keys(error, root: dict) -> list[str]:
    """The keys of the object that no schema of its node declares.

    jsonschema also calls a declared key "unevaluated" when the allOf/$ref branch declaring it fails
    (train.rank: 0 made train.log_every "unexpected"): that branch's own error names the real problem.
    """
    allowed = set(_allowed_keys(error.schema, root))
    return sorted(str(k) for k in error.instance if k not in allowed)


def _unknown_text(unknown: list[str], allowed: list[str]) -> str:
    import difflib

    if len(unknown) > 1:
        return f"unknown keys {', '.join(map(repr, unknown))}"
    close = difflib.get_close_matches(unknown[0], allowed, n=1)
    return f"unknown key {unknown[0]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")


def _true(error, root: dict) -> bool:
    """False for a key error that names no unknown key (a failing branch's echo, reported on its own)."""
    return error.validator not in _KEY_VALIDATORS or bool(_unknown_keys(error, root))


def _describe(error, root: dict) -> str:
    validator, value = error.validator, error.validator_value
    if validator == "enum":
        return f"{error.instance!r} is not allowed; allowed values: {', '.join(map(repr, value))}"
    if validator in _KEY_VALIDATORS:
        allowed = _allowed_keys(error.schema, root)
        unknown = _unknown_text(_unknown_keys(error, root), allowed)
        return f"{unknown}; allowed keys here: {', '.join(allowed) or '(none)'}"
    if validator in ("oneOf", "anyOf") and _choices(value, root):
        return f"{error.instance!r} is not allowed; allowed values: {', '.join(_choices(value, root))}"
    if validator == "type" and value == "object" and _named_entries(error.instance):
        first = error.instance[0]
        rest = ", ".join(f"{k}: {v!r}" for k, v in first.items() if k != "name")
        return (f"a list of named entries; this key is a mapping keyed by name, so that a layer can add or drop "
                f"(name: null) one entry: write `{first['name']}: {{{rest}}}` for each entry")
    if validator == "minItems" and not error.instance:
        return "an empty list; give at least one value"
    if validator == "minItems":
        why = (error.schema.get("description") or "").split(". ")[0].rstrip(".")
        return (f"{len(error.instance)} value(s) {error.instance!r}, but at least {value} are needed"
                + (f" ({why})" if why else ""))
    if validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bounds = {k: error.schema[k] for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
                  if k in error.schema}
        return f"{error.instance!r} is out of range; allowed: {bounds}"
    return error.message


def _named_entries(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) and "name" in v for v in value)


def validate(config: dict[str, Any], source="config.yaml") -> None:
    """Raise ConfigError naming every offending key (JSON schema, then cross-key checks).

    ``source`` is the name of the config's origin, or a function from a key path to the name of
    the file (or --config) that set it (ConfigLayers.source_of).
    """
    source_of = _source_function(source)
    found = schema_problems(config, "config")
    found += _cross_checks(config) if not found else []
    if found:
        problems = [f"{source_of(path)}: {dotted(path)}: {text}" for path, text in found]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def schema_problems(document: Any, name: str) -> list[tuple[KeyPath, str]]:
    """(key path, what is wrong and what is allowed) for each place ``document`` breaks schema ``name``."""
    import jsonschema

    schema = schemas.document(name)
    errors = jsonschema.Draft202012Validator(schema).iter_errors(document)
    return [(tuple(e.absolute_path), _describe(e, schema))
            for e in sorted(errors, key=lambda e: list(map(str, e.absolute_path))) if _true(e, schema)]


def schema_document() -> dict[str, Any]:
    """The config schema (src/anchormask/schemas/config.schema.yaml, package data)."""
    return schemas.document("config")


def _cross_checks(config: dict[str, Any]) -> list[tuple[KeyPath, str]]:
    problems: list[tuple[KeyPath, str]] = []
    for name, spec in config["arms"].items():
        if (spec["strategy"] is None) != (spec["targets"] is None):
            problems.append((("arms", name), "strategy and targets must both be null (base arm) or both be set"))
    for path, settings in [(("train",), config["train"])] + [
            (("train", "overrides", k), v) for k, v in config["train"].get("overrides", {}).items()]:
        ratio = settings.get("mask_ratio")
        if ratio and ratio["low"] > ratio["high"]:
            problems.append(((*path, "mask_ratio"), f"low ({ratio['low']}) must not exceed high ({ratio['high']})"))
    for strategy in strategies(config):
        settings = train_settings(config, strategy)
        if settings.get("grad_accum", 1) > settings["batch_size"]:
            override = ("train", "overrides", strategy, "grad_accum")
            at = override if has_path(config, override) else ("train", "grad_accum")
            problems.append((at, f"{settings['grad_accum']} micro-batches of a batch of {settings['batch_size']} "
                             f"pairs (train.batch_size); lower it to at most {settings['batch_size']}"))
    problems += [(("generation", key), text) for key, text in decoding_problems(config["generation"])]
    if config["data"]["in_domain"] in config["data"]["held_out"]:
        problems.append((("data", "held_out"), f"lists {config['data']['in_domain']!r}, the in-domain domain "
                         "(data.in_domain); a domain is in-domain or held out, not both: remove it here"))
    problems += _strategy_problems(config)
    arms = set(config["arms"])
    named = (config.get("probes") or {}).get("attention_arms")
    if named is not None and named != schemas.default(("probes", "attention_arms")):
        unknown = [a for a in named if a not in arms]
        if unknown:  # the default list is the default study's arms: study.attention_arms keeps those defined
            problems.append((("probes", "attention_arms"), f"unknown arm(s) {', '.join(unknown)}; arms: "
                             f"{', '.join(config['arms'])}"))
    domains = {config["data"]["in_domain"], *config["data"]["held_out"]}
    for comp in comparisons(config):
        where = ("statistics", "comparisons", comp["name"])
        for side in ("a", "b"):
            if comp[side] not in arms:
                problems.append(((*where, side), f"unknown arm {comp[side]!r}; arms: {', '.join(sorted(arms))}"))
        try:
            comparison_selection(comp)
        except fileio.InputError as err:
            problems.append((where, str(err)))
        if comp.get("domain") is not None and comp["domain"] not in domains:
            problems.append(((*where, "domain"), f"unknown domain {comp['domain']!r}; domains: "
                             f"{', '.join(sorted(domains))}"))
    return list(dict.fromkeys(problems))


def comparisons(config: dict[str, Any]) -> list[dict[str, Any]]:
    """statistics.comparisons as the list the statistics read, in the config's order: each entry its name
    first, then its keys as written (a layer's ``name: null`` drops that comparison)."""
    return [{"name": name, **spec} for name, spec in config["statistics"]["comparisons"].items()
            if spec is not None]


def _strategy_problems(config: dict[str, Any]) -> list[tuple[KeyPath, str]]:
    """Each strategy an arm, the sweep or an override names is built in or defined under strategies:, and a
    strategy of the config's own does not take a built-in name (the function itself: settings.checks)."""
    known = strategies(config)
    named: list[tuple[KeyPath, Any]] = [(("arms", a, "strategy"), spec["strategy"])
                                         for a, spec in config["arms"].items() if spec["strategy"]]
    named += [(("sweep", "strategies", i), s) for i, s in enumerate(config["sweep"]["strategies"])]
    named += [(("train", "overrides", s), s) for s in config["train"].get("overrides") or {}]
    problems: list[tuple[KeyPath, str]] = [
        (path, f"unknown strategy {name!r}; built-in: {', '.join(BUILTIN_STRATEGIES)}; define it under "
         f"strategies: (docs/strategies.md){_defined(config)}") for path, name in named if name not in known]
    problems += [(("strategies", s), f"{s!r} is a built-in strategy's name; name yours otherwise")
                 for s in config.get("strategies") or {} if s in BUILTIN_STRATEGIES]
    return problems


def _defined(config: dict[str, Any]) -> str:
    own = [s for s in config.get("strategies") or {} if s not in BUILTIN_STRATEGIES]
    return f"; defined there: {', '.join(own)}" if own else ""


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML keeps the last of two equal keys in a mapping; a config file must not say a thing twice."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (also on line {seen[key] + 1}): YAML would keep only the last; "
                    "remove or rename one", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def yaml_file(path: str | Path) -> Any:
    """A YAML file's content; a syntax error or a duplicate key names the file, line and column."""
    path = Path(path)
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found") from None
    except UnicodeDecodeError as err:
        line = err.object[:err.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset "
                          f"{err.start}); save the file as UTF-8") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        if problem.startswith("duplicate key"):
            raise ConfigError(f"{path}: {where}{problem}") from None
        raise ConfigError(f"{path}: {where}not valid YAML ({problem}); fix the syntax there") from None


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    config = yaml_file(path)
    validate(config, str(path))
    return config


def load_pretrain(path: str | Path) -> dict[str, Any]:
    """workflow/pretrain.yaml, checked against src/anchormask/schemas/pretrain.schema.yaml; errors name the
    file and the key."""
    spec = yaml_file(path)
    found = schema_problems(spec, "pretrain")
    if found:
        raise ConfigError(f"{path}: invalid pretraining settings:\n  "
                          + "\n  ".join(f"{path}: {dotted(key)}: {text}" for key, text in found))
    return spec


MIN_PROMPT_TOKENS = 3  # the shortest prompt: its opening and closing special tokens around one word


def check_base(config: dict[str, Any], source="config.yaml") -> None:
    """base.path names a checkpoint, and the study's sequences fit the base's maximum positions.

    Run when the DAG is built. The longest prompt is known only once the tokenizer runs (the
    generation job checks it exactly); here the shortest possible prompt is assumed, which
    catches an answer slot that cannot fit at all.
    """
    source_of = _source_function(source)
    where = f"{source_of(('base', 'path'))}: base.path"
    base = Path(config["base"]["path"])
    if not base.is_dir():
        raise ConfigError(f"{where}: {str(base)!r} is not a directory; point it at a checkpoint folder "
                          "(config.json, weights, tokenizer files)")
    if not (base / "config.json").is_file():
        raise ConfigError(f"{where}: {base} has no config.json; point it at a complete checkpoint folder")
    raw = fileio.read_json(base / "config.json")
    problems = _position_problems(config, max_positions(raw), base) + _checkpointing_problems(config, raw, base)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(
            f"{source_of(path)}: {dotted(path)}: {text}" for path, text in problems))


def _position_problems(config: dict[str, Any], limit, base: Path) -> list[tuple[KeyPath, str]]:
    if limit is None:
        return []
    key, allowed = limit
    stated = f"the base allows {allowed} ({key} in {base}/config.json)"
    generation = config["generation"]
    extra = max([setting(config, ("generation", "extra_masks")), *setting(config, ("probes", "maskcount_k"))])
    need = MIN_PROMPT_TOKENS + generation["answer_len"] + extra
    problems: list[tuple[KeyPath, str]] = []
    if need > allowed:
        problems.append((("generation", "answer_len"), f"{generation['answer_len']} answer positions + {extra} extra "
                         f"masks (generation.extra_masks, probes.maskcount_k) + a prompt of at least "
                         f"{MIN_PROMPT_TOKENS} tokens = {need} positions, but {stated}; lower it to at most "
                         f"{allowed - need + generation['answer_len']}"))
    for strategy in strategies(config):
        seq_len = train_settings(config, strategy)["seq_len"]
        if seq_len > allowed:
            override = ("train", "overrides", strategy, "seq_len")
            path = override if has_path(config, override) else ("train", "seq_len")
            problems.append((path, f"{seq_len} positions, but {stated}; lower it to at most {allowed}"))
    return list(dict.fromkeys(problems))


def _checkpointing_problems(config: dict[str, Any], raw: dict[str, Any], base: Path) -> list[tuple[KeyPath, str]]:
    """train.gradient_checkpointing (shared or a strategy's override) that the base's code cannot honour:
    known from its files (checkpointing.declared_switch), before a job waits in a queue to find out."""
    wanted: dict[KeyPath, Any] = {}
    for strategy in strategies(config):
        value = train_settings(config, strategy).get("gradient_checkpointing")
        override = ("train", "overrides", strategy, "gradient_checkpointing")
        wanted.setdefault(override if has_path(config, override) else ("train", "gradient_checkpointing"), value)
    if not any(wanted.values()):
        return []
    switch = checkpointing.declared_switch(base, raw, bool(setting(config, ("base", "trust_remote_code"))))
    family = raw.get("model_type") or "base"
    return [(path, text) for path, value in wanted.items()
            if (text := checkpointing.problem(value, switch, str(base), family))]
