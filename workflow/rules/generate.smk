# Retrieval of each query's locus statement, then locked-anchor generation per arm.


rule retrieve:
    localrule: True
    input:
        corpus=corpus_pattern(),
        queries=query_file,
    output:
        "results/retrieval/{query_set}/{domain}.jsonl",
    params:
        settings=lambda wc: as_json({
            "retrieval": config["retrieval"],
            "split": study.split_of(config, wc.domain),
            "max_queries": config["data"].get("max_queries_per_domain"),
        }),
    log:
        "results/logs/retrieve/{query_set}/{domain}.log",
    benchmark:
        "results/benchmarks/retrieve/{query_set}/{domain}.tsv"
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        ENV
    script:
        "../scripts/retrieve.py"



rule generate_arm:
    input:
        verified=rules.verify_base.output[0],
        retrieval=retrieval_files(),
        adapters=arm_adapter_dirs,
    output:
        "results/generations/{arm}.jsonl",
    params:
        arm=lambda wc: as_json({"arm": wc.arm, **config["arms"][wc.arm]}),
        sampler=as_json(config["generation"]),
        base=as_json(base_record()),
    log:
        "results/logs/generate/{arm}.log",
    benchmark:
        "results/benchmarks/generate/{arm}.tsv"
    threads: config["generation"]["threads"]
    resources:
        mem_mb=model_resources("generate")["mem_mb"],
        gpu_mem_mb=model_resources("generate")["gpu_mem_mb"],
        runtime=60,
    conda:
        ENV
    script:
        "../scripts/generate.py"


rule generate_sweep:
    input:
        verified=rules.verify_base.output[0],
        retrieval=retrieval_files(["main"]),
        adapters=sweep_adapter_dirs,
    output:
        "results/generations/sweep/{strategy}_n{size}_s{steps}.jsonl",
    params:
        arm=lambda wc: as_json({"arm": study.sweep_arm(wc.strategy, wc.size, wc.steps),
                                "strategy": wc.strategy, "targets": "full"}),
        sampler=as_json(config["generation"]),
        base=as_json(base_record()),
    log:
        "results/logs/generate/sweep_{strategy}_n{size}_s{steps}.log",
    benchmark:
        "results/benchmarks/generate/sweep_{strategy}_n{size}_s{steps}.tsv"
    threads: config["generation"]["threads"]
    resources:
        mem_mb=model_resources("generate")["mem_mb"],
        gpu_mem_mb=model_resources("generate")["gpu_mem_mb"],
        runtime=60,
    conda:
        ENV
    script:
        "../scripts/generate.py"


rule gather_generations:
    localrule: True
    input:
        expand(rules.generate_arm.output[0], arm=ARMS),
    output:
        "results/generations/all.jsonl",
    log:
        "results/logs/gather_generations.log",
    benchmark:
        "results/benchmarks/gather_generations.tsv"
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        ENV
    script:
        "../scripts/gather.py"
