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
        # each figure's own settings only, so a change reruns the figure that draws it
        arm_order=lambda wc: as_json(ARMS if wc.figure == "main" else None),
        sweep_strategies=lambda wc: as_json(config["sweep"]["strategies"] if wc.figure == "sweep" else None),
    script:
        "../scripts/figure.py"


# Every adapter's loss and mask ratio per step (train_log.tsv), one panel per arm and per sweep strategy.
rule training_curves:
    input:
        adapters=[c["path"] for c in study.training_curves(config)],
    output:
        pdf="results/figures/training.pdf",
        png=report(
            "results/figures/training.png",
            caption="../report/training.rst",
            category="3. Figures",
        ),
    log:
        "results/logs/figure/training.log",
    benchmark:
        "results/benchmarks/figure/training.tsv"
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        curves=as_json(training_curve_specs()),
    script:
        "../scripts/training_curves.py"
