# The base checkpoint: verified against its pinned SHA-256 before anything uses it.


rule verify_base:
    input:
        base_files(),
    output:
        "results/base/verified.json",
    log:
        "results/logs/verify_base.log",
    benchmark:
        "results/benchmarks/verify_base.tsv"
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        base=as_json(base_record()),
    script:
        "../scripts/verify_base.py"


# Building the embedded base (not part of the default target; data/base/README.md). The text is
# read from Debian's wordnet-base and dict-gcide; the training state lives in results/pretrain/state
# (not an output, so a rerun resumes from it). Afterwards copy results/pretrain/base to data/base
# and pin its hash (docs/embedded-base.md).
rule pretrain_text:
    input:
        study=study_text_files(),
    output:
        train=local("results/pretrain/train.txt.gz"),
        validation=local("results/pretrain/validation.txt.gz"),
        record=local("results/pretrain/text_record.json"),
    log:
        "results/logs/pretrain_text.log",
    benchmark:
        "results/benchmarks/pretrain_text.tsv"
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=20,
    params:
        # only the keys the text depends on: extending training must not rebuild the text
        text=as_json(pretrain_text_settings()),
    script:
        "../scripts/pretrain_text.py"


rule pretrain_base:
    input:
        settings=PRETRAIN_SPEC,
        train=rules.pretrain_text.output.train,
        validation=rules.pretrain_text.output.validation,
    output:
        checkpoint=directory(local("results/pretrain/base")),
    log:
        "results/logs/pretrain_base.log",
    benchmark:
        "results/benchmarks/pretrain_base.tsv"
    conda:
        ENV
    threads: 1  # one thread per process ran 4-5x faster than two on a busy 2-core machine
    resources:
        mem_mb=8000,
        runtime=240,
    params:
        state_dir="results/pretrain/state",
    script:
        "../scripts/pretrain_base.py"


# Quality gates of the configured base (not part of the default target): masked-token accuracy
# and NLL, and the base's own generations for the study's anchors (base_eval.py).
rule evaluate_base:
    input:
        verified=rules.verify_base.output[0],
        # local(): one pretraining text for every base of a run with several (bases.smk keeps its path)
        validation=local(config["base_eval"]["validation"]) if config["base_eval"]["validation"] else [],
        study=study_text_files(),
    output:
        json=f"{study.BASE_EVAL_DIR}/evaluation.json",
        markdown=f"{study.BASE_EVAL_DIR}/summary.md",
    log:
        "results/logs/evaluate_base.log",
    benchmark:
        "results/benchmarks/evaluate_base.tsv"
    conda:
        ENV
    threads: config["generation"]["threads"]
    resources:
        mem_mb=model_resources("generate")["mem_mb"],
        gpu_mem_mb=model_resources("generate")["gpu_mem_mb"],
        cpus_per_task=model_resources("generate")["cpus_per_task"],
        runtime=60,
    params:
        base=as_json(base_record()),
        settings=as_json({k: config[k] for k in ("data", "retrieval", "generation", "base_eval")}),
    script:
        "../scripts/evaluate_base.py"
