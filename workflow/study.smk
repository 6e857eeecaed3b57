# The study of one base: every stage from verification to the report. The Snakefile includes it for
# the config's base; with `bases:` each base is one instance of it, a module whose results/ paths are
# rewritten to results/bases/<name>/ (workflow/rules/bases.smk).


include: "rules/common.smk"


wildcard_constraints:
    strategy="|".join(study.strategies(config)),
    targets="|".join(study.LORA_TARGETS),
    size=r"[0-9]+",
    steps=r"[0-9]+",
    seed=r"[0-9]+",
    domain="|".join(DOMAINS),
    query_set="|".join(QUERY_SETS),
    arm="|".join(ARMS),
    figure="|".join(FIGURES),


include: "rules/base.smk"
include: "rules/train.smk"
include: "rules/generate.smk"
include: "rules/analyze.smk"
include: "rules/figures.smk"
include: "rules/probes.smk"
include: "rules/lm_eval.smk"
include: "rules/report.smk"


if BASE_STUDY is not None:
    BASE_STUDY.targets.extend(flat_targets())

# After every rule is defined: each rule that runs a script gets its `code` param, the import-closure
# digest of that script (anchormask.repro.codedigest.add_code_params), so no rule names its script twice.
codedigest.add_code_params(workflow.rules, SCRIPTS, PACKAGE)
