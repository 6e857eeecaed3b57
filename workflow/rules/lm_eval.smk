# lm-evaluation-harness (docs/lm-eval.md): the base and every arm's adapters (default size and
# steps, each training seed) on the tasks of the optional top-level `lm_eval: {tasks: [...], ...}`, whose
# defaults are the config schema's; absent or empty tasks: no rule here and nothing in the default target.
# One job per (arm, training seed, task) with the `anchormask` model (src/anchormask/harness/), then the table
# of each arm against the base and its figure. The stage's part of the default target is lm_eval_targets()
# in common.smk.

import re

LM_EVAL = config["lm_eval"]  # Snakemake's validate filled in the schema's defaults
LM_EVAL_TASKS = list(LM_EVAL["tasks"])
LM_EVAL_OPTIONS = {k: LM_EVAL[k] for k in ("limit", "num_fewshot", "mc_num", "batch_size", "seed")}
LM_EVAL_JOBS = lm_eval_jobs()

if LM_EVAL_TASKS:

    rule lm_eval:
        input:
            verified=rules.verify_base.output[0],
            adapter=lm_eval_adapter,
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
            cpus_per_task=model_resources("generate")["cpus_per_task"],
            runtime=120,
        params:
            run=lambda wc: as_json(lm_eval_job(wc.arm, wc.run, wc.task)),
            lm_eval=as_json(LM_EVAL_OPTIONS),
            sampler=as_json(config["generation"]),
            base=as_json(base_record()),
        script:
            "../scripts/lm_eval.py"

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
            runs=as_json([lm_eval_job(a, run, t) for a, run, t in LM_EVAL_JOBS]),
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
