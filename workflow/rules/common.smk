# Configuration checks and the helpers every stage uses: every Python function the rules call (the
# wildcard constraints are in workflow/study.smk).

import functools
import json
import math
import os
from pathlib import Path

from snakemake.utils import validate

from anchormask import data as study_data
from anchormask import fileio as study_io
from anchormask.harness import tasks as study_lm_eval_tasks
from anchormask.model import memory as study_memory
from anchormask.model import verify as study_verify
from anchormask.repro import codedigest
from anchormask.settings import bases as study_bases
from anchormask.settings import checks as study_checks
from anchormask.settings import config as study_config
from anchormask import study

# Study of one base: the config Snakemake read (config.yaml, each --configfile, --config) is checked here.
# One instance of the study per base (`bases:`): bases.smk has merged and checked each base's config
# before loading its module, and the module's config is that merged config.
BASE_STUDY = study_bases.loading_now()
if BASE_STUDY is None:
    with study_io.stops_plainly():
        # The checks every study passes (anchormask.settings.checks; bases_common.smk runs them per base).
        CONFIG_LAYERS = study_checks.command_line_config(config, workflow.config_settings)
        study_config.check_base(config, CONFIG_LAYERS.source_of)
        anchor_lengths = study_checks.check_study(config, validate)
        if workflow.is_main_process:  # once per run, not in each job's own parse of the workflow
            study_checks.report_once([("", config, anchor_lengths)])
            # Task names lm-eval does not know fail inside its jobs otherwise, after a traceback.
            unknown_tasks = study_lm_eval_tasks.unknown_tasks(config["lm_eval"]["tasks"])
            if unknown_tasks:
                raise study_config.ConfigError(
                    f"{CONFIG_LAYERS.source_of(('lm_eval', 'tasks'))}: lm_eval.tasks: {'; '.join(unknown_tasks)}"
                )
else:
    CONFIG_LAYERS = BASE_STUDY.layers
CONFIG_SOURCES = CONFIG_LAYERS.source_of

PACKAGE = Path(workflow.basedir) / "src" / "anchormask"
SCRIPTS = Path(workflow.basedir) / "workflow" / "scripts"
ENV = f"../../envs/{study_bases.conda_env(config)}"  # the transformers 4.x one for a base that ships its code
PRETRAIN_SPEC = os.path.relpath(Path(workflow.basedir) / "workflow" / "pretrain.yaml")  # the embedded base's recipe
BASE = config["base"]
DOMAINS = study.domains(config)
ARMS = list(config["arms"])
SWEEP = study.sweep_points(config)
QUERY_SETS = study.query_sets(config)
FIGURES = ["main", "sweep", "ablation"]  # the {figure} wildcard's values; the default target and the report have each


def in_results(path):
    """A results/ path as this study's jobs see it: under results/bases/<name>/ in a run with several bases.
    Snakemake rewrites inputs, outputs and logs itself; a param that carries a path goes through here."""
    return path if BASE_STUDY is None else BASE_STUDY.in_results(path)


def announce_base_keys():
    """Tell verify_base (a localrule: it inherits this environment) which layer set base.path and base.sha256,
    so that a mismatch names the file to edit; an environment variable, not a param, so that moving a key
    between layers reruns nothing."""
    keys = json.loads(os.environ.get(study_verify.KEYS_ENV) or "{}")
    keys[in_results("results/base/verified.json")] = {
        key: CONFIG_LAYERS.where_set(("base", key)) for key in ("path", "sha256")
    }
    os.environ[study_verify.KEYS_ENV] = json.dumps(keys, sort_keys=True)


announce_base_keys()


def as_json(obj):
    """Params travel as canonical JSON text: Snakemake compares params by their repr."""
    return study_io.canonical_json(obj)


def base_record():
    # family, projections and layout only when set, so a config without them keeps its jobs' params.
    record = {k: BASE.get(k) for k in ("path", "sha256", "trust_remote_code", "device")}
    return record | {k: BASE[k] for k in ("family", "projections", "layout") if BASE.get(k) is not None}


def base_files():
    from anchormask.checksum import manifest_files

    return [str(p) for p in manifest_files(BASE["path"])] or [os.path.join(BASE["path"], "config.json")]


@functools.cache  # each model rule asks for three of its values; the memory model runs once per kind
def model_resources(kind):
    """SLURM requests of a job that loads the base (kind: train | generate): memory from the memory model
    checked at the real shapes (src/anchormask/model/memory.py, bench/scale.py), mem_mb on the host and
    gpu_mem_mb on the GPU, each the prediction for the base's config.json shape and this config's settings
    plus 15%, never under 4000 MB of host memory; cpus_per_task the job's threads (train.threads,
    generation.threads), so that a profile's or a site's default cannot shrink them."""
    threads = config["train" if kind == "train" else "generation"]["threads"]
    return {**study_memory.job_requests(config, kind), "cpus_per_task": threads}


def arm_adapter_dirs(wildcards):
    return [j.path for j in study.arm_adapters(config, wildcards.arm)]


def sweep_adapter_dirs(wildcards):
    return [j.path for j in study.sweep_adapters(config, wildcards.strategy, int(wildcards.size), int(wildcards.steps))]


def adapter_job(wildcards):
    return study.AdapterJob(
        wildcards.strategy, wildcards.targets, int(wildcards.size), int(wildcards.steps), int(wildcards.seed)
    )


def resume_state(wildcards):
    """The state of the study's shorter run of this adapter, if it trains one (study.resumes_from)."""
    shorter = study.resumes_from(config, adapter_job(wildcards))
    return [shorter.state] if shorter else []


def train_priority(wildcards):
    """Long runs start first: a training job's priority is the steps its run goes on to in the study,
    so the sweep's 1,000-step runs do not end the main job alone on one core."""
    return study.run_length(config, adapter_job(wildcards))


def corpus_pattern():
    return os.path.join(config["data"]["corpora_dir"], "{domain}.jsonl")


def query_file(wildcards):
    return str(study_data.queries_path(config, wildcards.domain, wildcards.query_set))


# The helpers below name other rules' outputs (rules.X.output): call them only after those rules are defined.
def retrieval_files(query_sets=tuple(QUERY_SETS)):
    """Retrieved queries of the named query sets (the arms' generations cover every set; the sweep
    and the probes only the main one)."""
    pairs = [(qs, d) for qs in query_sets for d in QUERY_SETS[qs]]
    return [rules.retrieve.output[0].format(query_set=qs, domain=d) for qs, d in pairs]


def retrieval_settings(wildcards):
    """What one retrieve job depends on besides its files: BM25's settings, the domain's split, the cap."""
    return as_json(
        {
            "retrieval": config["retrieval"],
            "split": study.split_of(config, wildcards.domain),
            "max_queries": config["data"].get("max_queries_per_domain"),
        }
    )


def sweep_arm_record(wildcards):
    """The arm a sweep generation job answers as: full LoRA targets of the point's strategy."""
    arm = study.sweep_arm(wildcards.strategy, wildcards.size, wildcards.steps)
    return as_json({"arm": arm, "strategy": wildcards.strategy, "targets": "full"})


def sweep_generation_files():
    return [rules.generate_sweep.output[0].format(strategy=s, size=n, steps=k) for s, n, k in SWEEP]


def default_targets():
    return [
        rules.headline.output[0],
        rules.samples.output[0],
        rules.paper.output[0],
        expand([rules.figure.output.pdf, rules.figure.output.png], figure=FIGURES),
        [rules.training_curves.output.pdf, rules.training_curves.output.png],
        probe_targets(),
        lm_eval_targets(),
    ]


def flat_targets():
    """The default target's files as one flat list (bases.smk asks each base's module for it)."""
    flat = []
    for item in default_targets():
        flat += flat_targets_of(item)
    return flat


def flat_targets_of(item):
    return [str(item)] if isinstance(item, str) else [f for sub in item for f in flat_targets_of(sub)]


def study_text_files():
    """Every corpus, query and pair file: the texts pretraining must not see, the anchors evaluation uses."""
    queries = [str(study_data.queries_path(config, d, qs)) for qs, domains in QUERY_SETS.items() for d in domains]
    return sorted({*corpus_files(), *queries, config["data"]["pairs"]})


def pretrain_text_settings():
    """The keys of workflow/pretrain.yaml that the pretraining text depends on (the file checked first)."""
    spec = study_config.load_pretrain(PRETRAIN_SPEC)
    return {
        "sources": spec["sources"],
        "validation_per_mille": spec["validation_per_mille"],
        "seed": spec["settings"]["seed"],
    }


def corpus_files():
    return [str(study_data.corpus_path(config, d)) for d in DOMAINS]


def bootstrap_settings():
    """The bootstrap's settings, for the jobs that draw intervals but run no test (figures, mask-count)."""
    return {k: config["statistics"][k] for k in ("resamples", "confidence", "seed")}


def statistics_settings(kind):
    stats = config["statistics"]
    settings = {k: stats[k] for k in ("resamples", "permutations", "confidence", "seed")}
    if kind == "comparisons":
        settings["comparisons"] = study_config.comparisons(config)
    else:
        settings["sweep_report"] = stats["sweep_report"]
    return as_json(settings)


# The probes (probes.smk). One job per arm generates every k of the mask-count probe (one JSONL each):
# the arm's model jobs then pay the process start-up and model load once, not once per k. A k equal
# to generation.extra_masks is the arm's main generation (same settings, same bytes) and is reused.
MASKCOUNT_JSONL = "results/probes/maskcount/{arm}_k{k}.jsonl"


def attention_specs(arms):
    """What the attention probe reads of each arm: its strategy, targets and adapters (this study's paths)."""
    return [
        {"arm": a, **config["arms"][a], "adapters": [in_results(j.path) for j in study.arm_adapters(config, a)]}
        for a in arms
    ]


def lora_specs(arms):
    """One entry per adapter of the arms: the LoRA probe's input."""
    return [
        {"arm": a, **config["arms"][a], "path": in_results(j.path)} for a in arms for j in study.arm_adapters(config, a)
    ]


def training_curve_specs():
    """The training figure's lines (study.training_curves), their adapters' paths as this study's jobs see them."""
    return [{**c, "path": in_results(c["path"])} for c in study.training_curves(config)]


def maskcount_new_k(runs):
    """The ks of the mask-count probe that need generations of their own."""
    return sorted({k for _, k in runs} - {config["generation"]["extra_masks"]})


def maskcount_files(runs):
    """Each (arm, k) generation the mask-count probe reads: the arm's main generation where k is its own."""
    extra = config["generation"]["extra_masks"]
    return [
        rules.generate_arm.output[0].format(arm=a) if k == extra else MASKCOUNT_JSONL.format(arm=a, k=k)
        for a, k in runs
    ]


def probe_targets():
    """The probes' part of the default target."""
    summary, attention, lora, maskcount = (
        rules.probe_summary.output,
        rules.probe_attention.output,
        rules.probe_lora.output,
        rules.probe_maskcount.output,
    )
    return (
        list(summary)
        + ([attention.pdf, attention.png] if study.attention_arms(config) else [])
        + ([lora.pdf, lora.png] if study.adapter_arms(config) else [])
        + ([maskcount.md, maskcount.pdf, maskcount.png] if study.maskcount_runs(config) else [])
    )


def lm_eval_jobs():
    """(arm, run, task) of every lm-eval evaluation (lm_eval.smk)."""
    return [(a, run, t) for a, run, _ in study.lm_eval_runs(config) for t in config["lm_eval"]["tasks"]]


def lm_eval_adapter(wildcards):
    """The adapter folder one lm-eval job loads ([] for an arm without one)."""
    runs = {(a, run): j for a, run, j in study.lm_eval_runs(config)}
    job = runs[(wildcards.arm, wildcards.run)]
    return [job.path] if job is not None else []


def lm_eval_job(arm, run, task):
    """What one lm-eval job evaluates: the arm, the adapter's training seed and folder (as this study's jobs
    see it), the task."""
    job = {(a, r): j for a, r, j in study.lm_eval_runs(config)}[(arm, run)]
    adapter = in_results(job.path) if job else None
    return {"arm": arm, "train_seed": job.seed if job else None, "adapter": adapter, "task": task}


def lm_eval_targets():
    """The lm-eval stage's part of the default target: nothing when it is off."""
    if not config["lm_eval"]["tasks"]:
        return []
    table, figure = rules.lm_eval_table.output, rules.lm_eval_figure.output
    return [table.md, table.table, figure.pdf, figure.png]


# The base evaluation (evaluate_base in base.smk) is outside the default target: on the embedded base its
# validation text needs Debian packages, and on a real base it is a GPU job of its own. With
# report.base_evaluation the report's page depends on it (so the DAG runs it); otherwise its section says
# "not available". A setting, not whether the file happens to exist when the DAG is built.
def base_eval_input():
    return [rules.evaluate_base.output.markdown] if config["report"]["base_evaluation"] else []
