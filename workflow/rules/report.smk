# The study on one page: the body of the `snakemake --report` landing page (workflow/report/workflow.rst).


rule paper:
    input:
        headline=rules.headline.output[0],
        samples=rules.samples.output[0],
        figures=expand(rules.figure.output.png, figure=FIGURES),
        caption="workflow/report/figure.rst",
        training=rules.training_curves.output.png,
        training_caption="workflow/report/training.rst",
        probes=rules.probe_summary.output[0],
        base_eval=base_eval_input(),
    output:
        report(
            "results/report/paper.html",
            caption="../report/paper.rst",
            category="0. The study on one page",
        ),
    log:
        "results/logs/paper.log",
    benchmark:
        "results/benchmarks/paper.tsv"
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        figures=FIGURES,
        confidence=config["statistics"]["confidence"],  # the captions state it
    script:
        "../scripts/paper.py"
