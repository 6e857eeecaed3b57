# The base checkpoint: verified against its pinned SHA-256 before anything uses it.


localrules:
    verify_base,


rule verify_base:
    input:
        base_files(),
    output:
        VERIFIED,
    params:
        base=as_json(base_record()),
        code=code_digest("checksum", "io"),
    log:
        "results/logs/verify_base.log",
    benchmark:
        "results/benchmarks/verify_base.tsv"
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        ENV
    script:
        "../scripts/verify_base.py"


# Builds the embedded base from WordNet (not part of the default target; ~15 min on 2 cores).
# Afterwards copy results/pretrain/base to data/base and pin its hash (README "The embedded base").
rule pretrain_base:
    input:
        settings="workflow/pretrain.yaml",
        corpora=expand("data/corpora/{domain}.jsonl", domain=config["data"]["held_out"]),
    output:
        text="results/pretrain/wordnet_text.txt.gz",
        checkpoint=directory("results/pretrain/base"),
    params:
        code=code_digest("pretrain", "io", "progress"),
    log:
        "results/logs/pretrain_base.log",
    benchmark:
        "results/benchmarks/pretrain_base.tsv"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        ENV
    script:
        "../scripts/pretrain_base.py"
