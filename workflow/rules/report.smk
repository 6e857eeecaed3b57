# The study on one page: the body of the `snakemake --report` landing page (workflow/report/workflow.rst).


localrules:
    paper,


REPORT_FIGURES = ["main", "sweep", "ablation"]


rule paper:
    input:
        headline="results/tables/headline.md",
        samples="results/tables/samples.md",
        figures=expand("results/figures/{figure}.png", figure=REPORT_FIGURES),
        caption="workflow/report/figure.rst",
        probes="results/probes/summary.md",
        base_eval=base_eval_input(),
    output:
        report(
            "results/report/paper.html",
            caption="../report/paper.rst",
            category="0. The study on one page",
        ),
    params:
        figures=REPORT_FIGURES,
        confidence=config["statistics"]["confidence"],  # the captions state it
        code=code_digest_of("paper.py"),
    log:
        "results/logs/paper.log",
    benchmark:
        "results/benchmarks/paper.tsv"
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        ENV
    script:
        "../scripts/paper.py"
