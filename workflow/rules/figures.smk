# Figures, each as PDF and PNG, registered for `snakemake --report`.


localrules:
    figure,


FIGURE_INPUT = {
    "main": "results/tables/generations.parquet",
    "ablation": "results/tables/generations.parquet",
    "sweep": "results/stats/sweep.parquet",
}


rule figure:
    input:
        lambda wc: FIGURE_INPUT[wc.figure],
    output:
        pdf="results/figures/{figure}.pdf",
        png=report(
            "results/figures/{figure}.png",
            caption="../report/figure.rst",
            category="3. Figures",
        ),
    params:
        which="{figure}",
        settings=as_json({k: config["statistics"][k] for k in ("resamples", "confidence", "seed")}),
        code=code_digest_of("figure.py"),
    log:
        "results/logs/figure/{figure}.log",
    benchmark:
        "results/benchmarks/figure/{figure}.tsv"
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        ENV
    script:
        "../scripts/figure.py"
