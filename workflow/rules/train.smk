# One LoRA training job per (strategy, LoRA targets, data size, steps, seed).


rule train_adapter:
    input:
        verified=rules.verify_base.output[0],
        pairs=config["data"]["pairs"],
    output:
        directory(study.ADAPTER_DIR),
    params:
        settings=lambda wc: as_json(study.train_settings(config, wc.strategy)),
        base=as_json(base_record()),
        code=code_digest_of("train_adapter.py"),
    log:
        f"results/logs/train/{study.ADAPTER_ID}.log",
    benchmark:
        f"results/benchmarks/train/{study.ADAPTER_ID}.tsv"
    threads: config["train"]["threads"]
    resources:
        mem_mb=model_resources("train")["mem_mb"],
        gpu_mem_mb=model_resources("train")["gpu_mem_mb"],
        runtime=120,
    conda:
        ENV
    script:
        "../scripts/train_adapter.py"
