# Retrieval of each query's locus statement, then locked-anchor generation per arm.


rule retrieve:
    input:
        corpus=corpus_pattern(),
        queries=query_file,
    output:
        "results/retrieval/{query_set}/{domain}.jsonl",
    log:
        "results/logs/retrieve/{query_set}/{domain}.log",
    benchmark:
        "results/benchmarks/retrieve/{query_set}/{domain}.tsv"
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        settings=retrieval_settings,
    script:
        "../scripts/retrieve.py"


rule generate_arm:
    input:
        verified=rules.verify_base.output[0],
        retrieval=retrieval_files(),
        adapters=arm_adapter_dirs,
    output:
        "results/generations/{arm}.jsonl",
    log:
        "results/logs/generate/{arm}.log",
    benchmark:
        "results/benchmarks/generate/{arm}.tsv"
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
        sampler=as_json(config["generation"]),
        base=as_json(base_record()),
    script:
        "../scripts/generate.py"


rule generate_sweep:
    input:
        verified=rules.verify_base.output[0],
        retrieval=retrieval_files(["main"]),
        adapters=sweep_adapter_dirs,
    output:
        "results/generations/sweep/{strategy}_n{size}_s{steps}.jsonl",
    log:
        "results/logs/generate/sweep_{strategy}_n{size}_s{steps}.log",
    benchmark:
        "results/benchmarks/generate/sweep_{strategy}_n{size}_s{steps}.tsv"
    conda:
        ENV
    threads: config["generation"]["threads"]
    resources:
        mem_mb=model_resources("generate")["mem_mb"],
        gpu_mem_mb=model_resources("generate")["gpu_mem_mb"],
        cpus_per_task=model_resources("generate")["cpus_per_task"],
        runtime=60,
    params:
        arm=sweep_arm_record,
        sampler=as_json(config["generation"]),
        base=as_json(base_record()),
    script:
        "../scripts/generate.py"


rule gather_generations:
    input:
        expand(rules.generate_arm.output[0], arm=ARMS),
    output:
        "results/generations/all.jsonl",
    log:
        "results/logs/gather_generations.log",
    benchmark:
        "results/benchmarks/gather_generations.tsv"
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/gather.py"
