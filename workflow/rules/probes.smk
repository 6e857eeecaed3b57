# Mechanism probes (docs/protocol.md, "Mechanism probes"): attention mass, LoRA weight
# allocation, mask-count robustness, and results/probes/summary.md. Config: the optional
# top-level `probes: {attention_arms: [...], maskcount_k: [...]}`, whose defaults are the config
# schema's (src/anchormask/schemas/config.schema.yaml). Which arms each probe reads is decided in
# anchormask.study; the probes' part of the default target is probe_targets() in common.smk.


ADAPTER_ARMS = study.adapter_arms(config)
ATTENTION_ARMS = study.attention_arms(config)
MASKCOUNT_RUNS = study.maskcount_runs(config)


rule probe_attention:
    input:
        verified=rules.verify_base.output[0],
        retrieval=retrieval_files(["main"]),
        adapters=[j.path for a in ATTENTION_ARMS for j in study.arm_adapters(config, a)],
    output:
        table="results/probes/attention.parquet",
        pdf="results/probes/attention.pdf",
        png=report(
            "results/probes/attention.png",
            caption="../report/probe_attention.rst",
            category="5. Probes",
        ),
    log:
        "results/logs/probes/attention.log",
    benchmark:
        "results/benchmarks/probes/attention.tsv"
    # The longest model job after training: once its adapters exist, before the short generation jobs (0).
    priority: 1
    conda:
        ENV
    threads: config["generation"]["threads"]
    resources:
        mem_mb=model_resources("generate")["mem_mb"],
        gpu_mem_mb=model_resources("generate")["gpu_mem_mb"],
        cpus_per_task=model_resources("generate")["cpus_per_task"],
        runtime=60,
    params:
        arms=as_json(attention_specs(ATTENTION_ARMS)),
        arm_order=as_json(ARMS),
        sampler=as_json(config["generation"]),
        base=as_json(base_record()),
    script:
        "../scripts/probe_attention.py"


rule probe_lora:
    input:
        adapters=[j.path for a in ADAPTER_ARMS for j in study.arm_adapters(config, a)],
    output:
        layers="results/probes/lora_norms.parquet",
        table="results/probes/lora_shares.parquet",
        pdf="results/probes/lora_norms.pdf",
        png=report(
            "results/probes/lora_norms.png",
            caption="../report/probe_lora.rst",
            category="5. Probes",
        ),
    log:
        "results/logs/probes/lora.log",
    benchmark:
        "results/benchmarks/probes/lora.tsv"
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        adapters=as_json(lora_specs(ADAPTER_ARMS)),
        arm_order=as_json(ARMS),
        projections=as_json(BASE.get("projections")),
    script:
        "../scripts/probe_lora.py"


# One job per arm generates every k of the probe (one JSONL each): the arm's model jobs then pay
# the process start-up and model load once, not once per k. A k equal to generation.extra_masks is
# the arm's main generation (same settings, same bytes) and is reused, not generated.
# One job per arm for every k of its own (common.smk: maskcount_new_k, maskcount_files).
MASKCOUNT_NEW_K = maskcount_new_k(MASKCOUNT_RUNS)

if MASKCOUNT_NEW_K:

    rule probe_maskcount_generate:
        input:
            verified=rules.verify_base.output[0],
            retrieval=retrieval_files(["main"]),
            adapters=arm_adapter_dirs,
        output:
            expand(MASKCOUNT_JSONL, arm="{arm}", k=MASKCOUNT_NEW_K),
        log:
            "results/logs/probes/maskcount_{arm}.log",
        benchmark:
            "results/benchmarks/probes/maskcount_{arm}.tsv"
        conda:
            ENV
        threads: config["generation"]["threads"]
        resources:
            mem_mb=model_resources("generate")["mem_mb"],
            gpu_mem_mb=model_resources("generate")["gpu_mem_mb"],
            cpus_per_task=model_resources("generate")["cpus_per_task"],
            runtime=60,
        params:
            arm=lambda wc: as_json({"arm": wc.arm, **config["arms"][wc.arm]}),
            samplers=as_json([{**config["generation"], "extra_masks": k} for k in MASKCOUNT_NEW_K]),
            base=as_json(base_record()),
        script:
            "../scripts/probe_maskcount_generate.py"


rule probe_maskcount:
    input:
        generations=maskcount_files(MASKCOUNT_RUNS),
        corpora=corpus_files(),
    output:
        table="results/probes/maskcount.parquet",
        md="results/probes/maskcount.md",
        pdf="results/probes/maskcount.pdf",
        png=report(
            "results/probes/maskcount.png",
            caption="../report/probe_maskcount.rst",
            category="5. Probes",
        ),
    log:
        "results/logs/probes/maskcount.log",
    benchmark:
        "results/benchmarks/probes/maskcount.tsv"
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        files=as_json([[a, k] for a, k in MASKCOUNT_RUNS]),
        arm_order=as_json(ARMS),
        domains=as_json(DOMAINS),
        settings=as_json(bootstrap_settings()),
    script:
        "../scripts/probe_maskcount.py"


# What the summary reads and the files its text points to, named by the rules that write them.
PROBE_FILES = {
    "comparisons": rules.statistics.output.comparisons,
    "attention": rules.probe_attention.output.table,
    "attention_figure": rules.probe_attention.output.pdf,
    "lora": rules.probe_lora.output.table,
    "lora_layers": rules.probe_lora.output.layers,
    "lora_figure": rules.probe_lora.output.pdf,
    "maskcount": rules.probe_maskcount.output.table,
    "maskcount_md": rules.probe_maskcount.output.md,
    "maskcount_figure": rules.probe_maskcount.output.pdf,
    "ablation": expand(rules.figure.output.pdf, figure="ablation")[0],
}


rule probe_summary:
    input:
        comparisons=PROBE_FILES["comparisons"],
        ablation=PROBE_FILES["ablation"],
        attention=[PROBE_FILES["attention"]] if ATTENTION_ARMS else [],
        lora=[PROBE_FILES["lora"]] if ADAPTER_ARMS else [],
        maskcount=[PROBE_FILES["maskcount"]] if MASKCOUNT_RUNS else [],
    output:
        report(
            "results/probes/summary.md",
            caption="../report/probe_summary.rst",
            category="5. Probes",
        ),
    log:
        "results/logs/probes/summary.log",
    benchmark:
        "results/benchmarks/probes/summary.tsv"
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        arms=as_json(config["arms"]),
        arm_order=as_json(ARMS),
        paths=as_json(PROBE_FILES),
    script:
        "../scripts/probe_summary.py"
