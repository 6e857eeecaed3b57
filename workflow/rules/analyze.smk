# From generations to per-generation Parquet tables, bootstrap statistics and the headline table.


# The comparison tables: the report's metric and content-word overlap on the main query set, and
# the report's metric on the second query set when there is one.
COMPARISON_TABLES = {
    "comparisons": {"metric": "overlap", "query_set": "main"},
    "content_comparisons": {"metric": "content_overlap", "query_set": "main"},
    **({"comparisons_alt": {"metric": "overlap", "query_set": "alt"}} if "alt" in QUERY_SETS else {}),
}


rule aggregate:
    input:
        generations=[rules.gather_generations.output[0]],
        corpora=corpus_files(),
    output:
        "results/tables/generations.parquet",
    log:
        "results/logs/aggregate.log",
    benchmark:
        "results/benchmarks/aggregate.tsv"
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        domains=as_json(DOMAINS),
    script:
        "../scripts/aggregate.py"


rule aggregate_sweep:
    input:
        generations=sweep_generation_files(),
        corpora=corpus_files(),
    output:
        "results/tables/sweep.parquet",
    log:
        "results/logs/aggregate_sweep.log",
    benchmark:
        "results/benchmarks/aggregate_sweep.tsv"
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        domains=as_json(DOMAINS),
    script:
        "../scripts/aggregate.py"


rule statistics:
    input:
        rules.aggregate.output[0],
    output:
        **{name: f"results/stats/{name}.parquet" for name in COMPARISON_TABLES},
    log:
        "results/logs/statistics.log",
    benchmark:
        "results/benchmarks/statistics.tsv"
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        kind="comparisons",
        tables=as_json([{"table": name, **spec} for name, spec in COMPARISON_TABLES.items()]),
        settings=statistics_settings("comparisons"),
    script:
        "../scripts/statistics.py"


rule statistics_sweep:
    input:
        rules.aggregate_sweep.output[0],
    output:
        "results/stats/sweep.parquet",
    log:
        "results/logs/statistics_sweep.log",
    benchmark:
        "results/benchmarks/statistics_sweep.tsv"
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        kind="sweep",
        tables=as_json([{"table": "sweep", "metric": "overlap", "query_set": "main"}]),
        settings=statistics_settings("sweep"),
        strategies=as_json(config["sweep"]["strategies"]),  # the first against each of the others
    script:
        "../scripts/statistics.py"


rule headline:
    input:
        comparisons=rules.statistics.output.comparisons,
        content=rules.statistics.output.content_comparisons,
        sweep=rules.statistics_sweep.output[0],
        generations=rules.aggregate.output[0],
        alt=[rules.statistics.output.comparisons_alt] if "comparisons_alt" in COMPARISON_TABLES else [],
    output:
        report(
            "results/tables/headline.md",
            caption="../report/headline.rst",
            category="1. Headline",
        ),
    log:
        "results/logs/headline.log",
    benchmark:
        "results/benchmarks/headline.tsv"
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        base=as_json({"path": BASE["path"], "sha256": BASE["sha256"]}),
        comparisons=as_json(study_config.comparisons(config)),
        sweep_strategies=as_json(config["sweep"]["strategies"]),
    script:
        "../scripts/headline.py"


rule samples:
    input:
        generations=rules.gather_generations.output[0],
        table=rules.aggregate.output[0],
    output:
        report(
            "results/tables/samples.md",
            caption="../report/samples.rst",
            category="2. Samples",
        ),
    log:
        "results/logs/samples.log",
    benchmark:
        "results/benchmarks/samples.tsv"
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        settings=as_json({"arms": ARMS, "domains": DOMAINS, "per_domain": config["report"]["samples_per_domain"]}),
    script:
        "../scripts/samples.py"
