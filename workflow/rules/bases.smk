# Several bases in one run (config `bases:`, docs/bases.md). Each base's study is
# one instance of workflow/study.smk, a Snakemake module whose results/ paths are rewritten to
# results/bases/<name>/, its rules named base_<name>_<rule>. Then the comparison across bases:
# results/tables/bases.{md,parquet}, results/figures/bases.{pdf,png} and results/report/paper.html.


include: "bases_common.smk"


# The pretraining of the embedded base belongs to no base: its rules keep results/pretrain/ (local()
# paths are not rewritten) and only the first base's instance defines them.
PRETRAIN_RULES = ["pretrain_text", "pretrain_base"]
for _i, _base in enumerate(BASE_STUDIES):
    workflow.module(
        name=_base.module,
        snakefile=str(Path(workflow.basedir) / "workflow" / "study.smk"),
        config=_base.config,
        replace_prefix=_base.replace_prefix,
    )
    # What `use rule * from MODULE as MODULE_*` compiles to, for a module named at run time.
    with study_bases.loading(_base):
        workflow.userule(
            rules=["*"],
            from_module=_base.module,
            exclude_rules=PRETRAIN_RULES if _i else [],
            name_modifier=f"{_base.module}_*",
            lineno=1,
        )(lambda: None)


rule compare_bases:
    input:
        generations=[base_output(b, "aggregate")[0] for b in BASE_STUDIES],
        comparisons=[base_output(b, "statistics").comparisons for b in BASE_STUDIES],
        verified=[base_output(b, "verify_base")[0] for b in BASE_STUDIES],
        evaluations=[base_evaluation(b) for b in BASE_STUDIES if base_evaluation(b)],
    output:
        markdown="results/tables/bases.md",
        table="results/tables/bases.parquet",
        differences="results/tables/bases_differences.parquet",
    log:
        "results/logs/compare_bases.log",
    benchmark:
        "results/benchmarks/compare_bases.tsv"
    localrule: True
    conda:
        "../../envs/anchormask.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        bases=study_io.canonical_json(
            [
                {
                    "name": b.name,
                    "source": b.source,
                    "base": b.config["base"],
                    "comparisons": study_config.comparisons(b.config),
                    "evaluation": base_evaluation(b),
                }
                for b in BASE_STUDIES
            ]
        ),
        settings=study_io.canonical_json(
            {k: config["statistics"][k] for k in ("resamples", "permutations", "confidence", "seed")}
        ),
    script:
        "../scripts/compare_bases.py"


rule bases_figure:
    input:
        table=rules.compare_bases.output.table,
    output:
        pdf="results/figures/bases.pdf",
        png=report("results/figures/bases.png", caption="../report/bases_figure.rst", category="0. Across bases"),
    log:
        "results/logs/bases_figure.log",
    benchmark:
        "results/benchmarks/bases_figure.tsv"
    localrule: True
    conda:
        "../../envs/anchormask.yaml"
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/bases_figure.py"


rule bases_paper:
    input:
        markdown=rules.compare_bases.output.markdown,
        figure=rules.bases_figure.output.png,
        papers=[base_output(b, "paper")[0] for b in BASE_STUDIES],
    output:
        report("results/report/paper.html", caption="../report/bases_paper.rst", category="0. Across bases"),
    log:
        "results/logs/bases_paper.log",
    benchmark:
        "results/benchmarks/bases_paper.tsv"
    localrule: True
    conda:
        "../../envs/anchormask.yaml"
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        bases=[b.name for b in BASE_STUDIES],
    script:
        "../scripts/bases_paper.py"


# The rules across bases get their `code` param as the study's rules do (workflow/study.smk).
codedigest.add_code_params(
    workflow.rules, Path(workflow.basedir) / "workflow" / "scripts", Path(workflow.basedir) / "src" / "anchormask"
)
