# One LoRA training job per (strategy, LoRA targets, data size, steps, seed). A job whose run the
# study also trains for fewer steps continues that shorter job's state instead of starting at step 0
# (src/anchormask/training/resume.py says why the adapter is the same): the sweep's 1,000-step run goes on from
# its 300-step run, which goes on from its 100-step run (resume_state in common.smk).


rule train_adapter:
    input:
        verified=rules.verify_base.output[0],
        pairs=config["data"]["pairs"],
        resume=resume_state,
    output:
        adapter=directory(study.ADAPTER_DIR),
        state=study.TRAIN_STATE,
    log:
        f"results/logs/train/{study.ADAPTER_ID}.log",
    benchmark:
        f"results/benchmarks/train/{study.ADAPTER_ID}.tsv"
    priority: train_priority
    conda:
        ENV
    threads: config["train"]["threads"]
    resources:
        mem_mb=model_resources("train")["mem_mb"],
        gpu_mem_mb=model_resources("train")["gpu_mem_mb"],
        cpus_per_task=model_resources("train")["cpus_per_task"],
        runtime=120,
    params:
        settings=lambda wc: as_json(study.adapter_settings(config, adapter_job(wc))),
        base=as_json(base_record()),
    script:
        "../scripts/train_adapter.py"
