# lm-evaluation-harness (docs/lm-eval.md): the base and every arm's adapters (default size and
# steps, each training seed) on the tasks of the optional top-level `lm_eval: {tasks: [...], ...}`, whose
# defaults are the config schema's; absent or empty tasks: no rule here and nothing in the default target.
# One job per (arm, training seed, task) with the `anchormask` model (src/anchormask/harness/), then the table
# of each arm against the base and its figure. The stage's part of the default target is lm_eval_targets()
# at the end (a lambda: snakemake --lint flags a file with a def and a rule).

import re

from anchormask.harness import tasks as study_lm_eval_tasks

LM_EVAL = config["lm_eval"]  # Snakemake's validate filled in the schema's defaults
LM_EVAL_TASKS = list(LM_EVAL["tasks"])
# (arm, run, adapter job): run is seed<N> for each adapter of the arm, none for an arm without one.
LM_EVAL_RUNS = [(a, f"seed{j.seed}", j) for a in ARMS for j in study.arm_adapters(config, a)] + [
    (a, "none", None) for a in ARMS if not study.arm_adapters(config, a)
]
LM_EVAL_ADAPTERS = {(a, run): j for a, run, j in LM_EVAL_RUNS}
# What a job evaluates: the arm, the adapter's training seed and its folder (as this study's jobs see it).
LM_EVAL_WHO = {
    (a, run): {"arm": a, "train_seed": j.seed if j else None, "adapter": in_results(j.path) if j else None}
    for a, run, j in LM_EVAL_RUNS
}
LM_EVAL_OPTIONS = {k: LM_EVAL[k] for k in ("limit", "num_fewshot", "mc_num", "batch_size", "seed")}

if LM_EVAL_TASKS:

    rule lm_eval:
        input:
            verified=rules.verify_base.output[0],
            adapter=lambda wc: [j.path for j in [LM_EVAL_ADAPTERS[(wc.arm, wc.run)]] if j is not None],
            task=lambda wc: study_lm_eval_tasks.task_files(wc.task),
        output:
            "results/lm_eval/{arm}/{run}/{task}.json",
        log:
            "results/logs/lm_eval/{arm}_{run}_{task}.log",
        benchmark:
            "results/benchmarks/lm_eval/{arm}_{run}_{task}.tsv"
        wildcard_constraints:
            run=r"none|seed[0-9]+",
            task="|".join(re.escape(t) for t in LM_EVAL_TASKS),
        conda:
            ENV
        threads: config["generation"]["threads"]
        resources:
            mem_mb=model_resources("generate")["mem_mb"],
            gpu_mem_mb=model_resources("generate")["gpu_mem_mb"],
            runtime=120,
        params:
            run=lambda wc: as_json({**LM_EVAL_WHO[(wc.arm, wc.run)], "task": wc.task}),
            lm_eval=as_json(LM_EVAL_OPTIONS),
            sampler=as_json(config["generation"]),
            base=as_json(base_record()),
        script:
            "../scripts/lm_eval.py"

    LM_EVAL_JOBS = [(a, run, t) for a, run, _ in LM_EVAL_RUNS for t in LM_EVAL_TASKS]

    rule lm_eval_table:
        input:
            results=[rules.lm_eval.output[0].format(arm=a, run=run, task=t) for a, run, t in LM_EVAL_JOBS],
        output:
            md=report("results/tables/lm_eval.md", caption="../report/lm_eval.rst", category="6. Benchmarks"),
            table="results/tables/lm_eval.parquet",
        log:
            "results/logs/lm_eval/table.log",
        benchmark:
            "results/benchmarks/lm_eval/table.tsv"
        conda:
            ENV
        resources:
            mem_mb=1000,
            runtime=10,
        params:
            runs=as_json([{**LM_EVAL_WHO[(a, run)], "task": t} for a, run, t in LM_EVAL_JOBS]),
        script:
            "../scripts/lm_eval_table.py"

    rule lm_eval_figure:
        input:
            rules.lm_eval_table.output.table,
        output:
            pdf="results/figures/lm_eval.pdf",
            png=report("results/figures/lm_eval.png", caption="../report/lm_eval.rst", category="6. Benchmarks"),
        log:
            "results/logs/lm_eval/figure.log",
        benchmark:
            "results/benchmarks/lm_eval/figure.tsv"
        conda:
            ENV
        resources:
            mem_mb=1000,
            runtime=10,
        script:
            "../scripts/lm_eval_figure.py"


# The stage's part of the default target (called by default_targets() in common.smk): nothing when it is off.
lm_eval_targets = lambda: (
    [
        rules.lm_eval_table.output.md,
        rules.lm_eval_table.output.table,
        rules.lm_eval_figure.output.pdf,
        rules.lm_eval_figure.output.png,
    ]
    if LM_EVAL_TASKS
    else []
)
