# Figures, each as PDF and PNG, registered for `snakemake --report`.


rule figure:
    input:
        # main and ablation read the generations table; sweep the sweep's statistics.
        lambda wc: rules.statistics_sweep.output[0] if wc.figure == "sweep" else rules.aggregate.output[0],
    output:
        pdf="results/figures/{figure}.pdf",
        png=report(
            "results/figures/{figure}.png",
            caption="../report/figure.rst",
            category="3. Figures",
        ),
    log:
        "results/logs/figure/{figure}.log",
    benchmark:
        "results/benchmarks/figure/{figure}.tsv"
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        which="{figure}",
        settings=as_json(bootstrap_settings()),
        arm_order=as_json(ARMS),
        sweep_strategies=as_json(config["sweep"]["strategies"]),
    script:
        "../scripts/figure.py"
