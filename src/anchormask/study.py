"""The study's jobs, derived from a valid configuration: training settings per strategy, the
adapters (one per strategy, LoRA targets, size, steps and seed) each arm and sweep point uses,
the domains and query sets, and what a comparison selects.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from anchormask import fileio, schemas
from anchormask.repro import codedigest

# The built-in masking strategies and the LoRA target sets: the config schema's enums, read once; a
# config's own strategies (strategies:) join the built-in ones (``strategies``).
_DEFS = schemas.document("config")["$defs"]
BUILTIN_STRATEGIES = tuple(_DEFS["builtin_strategy"]["enum"])
LORA_TARGETS = tuple(_DEFS["targets"]["enum"])
STEP_FREE_STRATEGIES = ("anchor", "random", "reverse")  # the study's own: their masks ignore the step
# An adapter's id and folder: train.smk writes ADAPTER_DIR, AdapterJob.path names one of its outputs.
ADAPTER_ID = "{strategy}_{targets}_n{size}_s{steps}_seed{seed}"
ADAPTER_DIR = "results/adapters/" + ADAPTER_ID
# A training job's state after its last step, from which a longer run of the same adapter continues (resume.py).
TRAIN_STATE = "results/train_state/" + ADAPTER_ID + ".safetensors"
# Where the base evaluation writes (rule evaluate_base, and `anchormask evaluate-base` by default).
BASE_EVAL_DIR = "results/base_eval"

# What an adapter is made from: the training rule's params, so changing one retrains. train.log_every
# (how often the job's log reports progress) is not among them: the train script adds it (train_adapter.py).
TRAIN_KEYS = ("seq_len", "rank", "alpha", "dropout", "lr", "weight_decay", "warmup_steps", "batch_size",
              "subset", "mask_ratio", "loss", "tv_weight", "threads", "gradient_checkpointing", "grad_accum")


def strategies(config: dict[str, Any]) -> tuple[str, ...]:
    """Every strategy a config may name: the built-in ones, then its own (strategies:) in its order."""
    return BUILTIN_STRATEGIES + tuple(s for s in config.get("strategies") or {} if s not in BUILTIN_STRATEGIES)


def strategy_spec(config: dict[str, Any], strategy: str, root: Path | None = None) -> dict[str, Any] | None:
    """A strategy of the config's own as its adapters record it: function, params, classes and ``code``, the
    digest of its file and of the modules the file imports from its own folder (None for a built-in one)."""
    spec = (config.get("strategies") or {}).get(strategy)
    if spec is None:
        return None
    reference = spec["function"]
    target = Path(reference.rpartition(":")[0])
    path = target if root is None or target.is_absolute() else root / target
    code = codedigest.user_code_digest(path) if target.suffix == ".py" and path.is_file() else None
    return {"function": reference, "params": copy.deepcopy(spec.get("params") or {}),
            "classes": list(spec.get("classes") or ["question", "answer"]), "code": code}


def train_settings(config: dict[str, Any], strategy: str) -> dict[str, Any]:
    """The settings that make one strategy's adapters: the defaults with its overrides applied, and for a
    strategy of the config's own its spec (``strategy_spec``: its file's code is part of the adapters)."""
    settings = {k: copy.deepcopy(config["train"][k]) for k in TRAIN_KEYS if k in config["train"]}
    settings.update(copy.deepcopy(config["train"].get("overrides", {}).get(strategy, {})))
    spec = strategy_spec(config, strategy)
    if spec is not None:
        settings["strategy"] = spec
    return dict(sorted(settings.items()))


def adapter_settings(config: dict[str, Any], job: AdapterJob) -> dict[str, Any]:
    """The training rule's settings of one adapter: its strategy's, and but for the study's three strategies
    (which mask alike at every step) ``run_steps``, the run's total steps (``run_length``), which the
    strategy sees as ``total_steps``: a run that a longer adapter continues then masks as the longer one."""
    settings = train_settings(config, job.strategy)
    if job.strategy not in STEP_FREE_STRATEGIES:
        settings["run_steps"] = run_length(config, job)
    return dict(sorted(settings.items()))


def with_log_cadence(settings: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """What a training run is given: its adapter's settings and how often its log reports (train.log_every)."""
    return dict(sorted((settings | {"log_every": config["train"]["log_every"]}).items()))


def run_settings(config: dict[str, Any], strategy: str) -> dict[str, Any]:
    """train.train's settings for one strategy's adapters, outside the workflow (the benchmarks)."""
    return with_log_cadence(train_settings(config, strategy), config)


@dataclass(frozen=True, order=True)
class AdapterJob:
    strategy: str
    targets: str
    size: int
    steps: int
    seed: int

    @property
    def id(self) -> str:
        return ADAPTER_ID.format(**asdict(self))

    @property
    def path(self) -> str:
        return ADAPTER_DIR.format(**asdict(self))

    @property
    def state(self) -> str:
        return TRAIN_STATE.format(**asdict(self))

    def same_run(self, other: AdapterJob) -> bool:
        """Whether the two adapters are one training run stopped at different steps."""
        return (self.strategy, self.targets, self.size, self.seed) == (other.strategy, other.targets, other.size,
                                                                        other.seed)


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


def sweep_arm(strategy: str, size: int, steps: int) -> str:
    """The arm name of one sweep point's generations (and of the sweep statistics' ``a`` and ``b``)."""
    return f"sweep:{strategy}_n{size}_s{steps}"


def sweep_adapters(config: dict[str, Any], strategy: str, size: int, steps: int) -> list[AdapterJob]:
    seeds = config["sweep"].get("seeds") or config["train"]["seeds"]
    return [AdapterJob(strategy, "full", size, steps, s) for s in seeds]


def trained_adapters(config: dict[str, Any]) -> list[AdapterJob]:
    """Every adapter the study trains: the arms' and the sweep's, once each, sorted."""
    jobs = {j for arm in config["arms"] for j in arm_adapters(config, arm)}
    jobs |= {j for point in sweep_points(config) for j in sweep_adapters(config, *point)}
    return sorted(jobs)


def _run_steps(config: dict[str, Any], job: AdapterJob) -> list[int]:
    """The steps at which the study takes adapters of ``job``'s run (same strategy, targets, size, seed)."""
    return [j.steps for j in trained_adapters(config) if j.same_run(job)]


def resumes_from(config: dict[str, Any], job: AdapterJob) -> AdapterJob | None:
    """The adapter of the study that ``job``'s run passes through last: same strategy, targets, size and
    seed, the most steps below ``job``'s (resume.py says why the run can continue from its state)."""
    shorter = [steps for steps in _run_steps(config, job) if steps < job.steps]
    return replace(job, steps=max(shorter)) if shorter else None


def run_length(config: dict[str, Any], job: AdapterJob) -> int:
    """The most steps the study trains ``job``'s run to (its own steps, or a longer adapter's that continues it)."""
    return max([job.steps, *_run_steps(config, job)])


def domains(config: dict[str, Any]) -> list[str]:
    return [config["data"]["in_domain"], *config["data"]["held_out"]]


def query_sets(config: dict[str, Any]) -> dict[str, list[str]]:
    """Query set -> its domains: ``main`` covers every domain, ``alt`` (when configured) the held-out ones."""
    sets = {"main": domains(config)}
    if config["data"].get("alt_queries_dir"):
        sets["alt"] = list(config["data"]["held_out"])
    return sets


def comparison_selection(comp: Mapping[str, Any]) -> tuple[str, str]:
    """A comparison's queries: ("split", in_domain | held_out) or ("domain", name), exactly one given."""
    given = [key for key in ("split", "domain") if key in comp]
    if len(given) != 1:
        raise fileio.InputError(f"comparison {comp.get('name')!r}: give exactly one of split or domain")
    if given == ["split"] and comp["split"] not in ("in_domain", "held_out"):
        raise fileio.InputError(f"comparison {comp.get('name')!r}: split must be in_domain or held_out, "
                            f"got {comp['split']!r}")
    return given[0], comp[given[0]]


def split_of(config: dict[str, Any], domain: str) -> str:
    return "in_domain" if domain == config["data"]["in_domain"] else "held_out"


# The probes' arms (workflow/rules/probes.smk): which arms each probe reads, found by what they are.
MASKCOUNT_KINDS = ((None, None), ("anchor", "full"), ("random", "full"))  # the base, full anchor, full random


def adapter_arms(config: dict[str, Any]) -> list[str]:
    """The arms with an adapter, in config order (the LoRA probe's)."""
    return [a for a, spec in config["arms"].items() if spec["strategy"] is not None]


def training_curves(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The training figure's lines, one per trained adapter: a panel per arm with an adapter (a line per
    seed), then a panel per sweep strategy (a line per size and seed; ``run`` names the training run that
    the sweep's step counts share, whose longest adapter logs them all)."""
    seeds = len(config["sweep"].get("seeds") or config["train"]["seeds"]) > 1
    curves = [{"panel": arm, "label": f"seed {j.seed}", "run": j.id, "steps": j.steps, "path": j.path}
              for arm in adapter_arms(config) for j in arm_adapters(config, arm)]
    for strategy, size, steps in sweep_points(config):
        for j in sweep_adapters(config, strategy, size, steps):
            curves.append({"panel": f"sweep: {strategy}", "label": f"n{size}" + (f" seed {j.seed}" if seeds else ""),
                           "run": f"n{size}_seed{j.seed}", "steps": steps, "path": j.path})
    return curves


def attention_arms(config: dict[str, Any]) -> list[str]:
    """probes.attention_arms; the schema's default list (which names the default study's arms) keeps the
    arms this config defines. settings.config refuses an unknown arm in any other list."""
    named = list(config["probes"]["attention_arms"])
    if named == schemas.default(("probes", "attention_arms")):
        return [a for a in named if a in config["arms"]]
    return named


def maskcount_arms(config: dict[str, Any]) -> list[str]:
    """The mask-count probe's arms: the base and the full-target anchor and random arms, whatever their names."""
    return [a for a, spec in config["arms"].items() if (spec["strategy"], spec["targets"]) in MASKCOUNT_KINDS]


def maskcount_runs(config: dict[str, Any]) -> list[tuple[str, int]]:
    """(arm, k) of each mask-count generation, k the extra masks (probes.maskcount_k, sorted, once each)."""
    ks = sorted({int(k) for k in config["probes"]["maskcount_k"]})
    return [(a, k) for a in maskcount_arms(config) for k in ks]


def lm_eval_runs(config: dict[str, Any]) -> list[tuple[str, str, AdapterJob | None]]:
    """(arm, run, adapter) of each lm-eval evaluation but its task: ``seed<N>`` for each adapter of an arm,
    ``none`` for an arm without one (workflow/rules/lm_eval.smk)."""
    runs = [(a, f"seed{j.seed}", j) for a in config["arms"] for j in arm_adapters(config, a)]
    return runs + [(a, "none", None) for a in config["arms"] if not arm_adapters(config, a)]
