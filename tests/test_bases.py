"""Several bases in one run (config `bases:`): layers merged and checked per base, the DAG per base
under results/bases/<name>/, reruns confined to the base that changed, and the statistics across bases
checked against each base's own numbers recomputed from its generations."""

import itertools
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from anchormask import checksum
from anchormask.measurement import tables
from anchormask.reporting import bases as report_bases
from anchormask.settings import bases, config
from anchormask.settings import layers as config_layers
from anchormask.stats import crossbase
from helpers import REPO, copy_repo, dry_run_jobs, snakemake
from tiny_families import BUILDERS, remote_code_runs

# ---------------------------------------------------------------------------------------------- unit

@pytest.mark.unit
def test_a_layer_merges_mapping_by_mapping_and_replaces_lists():
    common = {"train": {"rank": 16, "seeds": [42], "default": {"size": 144, "steps": 300}}, "arms": {"a": 1}}
    out = config_layers.merge(common, {"train": {"seeds": [1, 2], "default": {"steps": 100}}, "arms": {"b": 2}})
    assert out == {"train": {"rank": 16, "seeds": [1, 2], "default": {"size": 144, "steps": 100}},
                   "arms": {"a": 1, "b": 2}}
    assert common["train"]["seeds"] == [42]  # the common config is not touched


def _layers(cfg):
    return config_layers.ConfigLayers((("config.yaml", cfg),))


@pytest.mark.unit
def test_a_base_s_parameters_come_from_its_safetensors_headers_and_a_cut_file_is_named(tmp_path):
    import torch
    from safetensors.torch import save_file

    from anchormask.fileio import InputError

    save_file({"w": torch.zeros(3, 5)}, str(tmp_path / "model-1.safetensors"))
    save_file({"v": torch.zeros(7), "u": torch.zeros(2, 2)}, str(tmp_path / "model-2.safetensors"))
    assert report_bases.safetensors_parameters(tmp_path) == 15 + 7 + 4
    cut = tmp_path / "model-2.safetensors"
    cut.write_bytes(cut.read_bytes()[:12])
    with pytest.raises(InputError, match="model-2.safetensors: the safetensors header cannot be read"):
        report_bases.safetensors_parameters(tmp_path)


@pytest.mark.unit
def test_a_layer_with_an_unknown_key_names_the_base_the_file_and_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = config.yaml_file("config.yaml")
    layer = tmp_path / "second.yaml"
    layer.write_text("train: {rnak: 8}\n")
    cfg["bases"] = {"first": {}, "second": str(layer)}
    with pytest.raises(config.ConfigError) as err:
        bases.studies(cfg, _layers(cfg))
    text = str(err.value)
    assert text.startswith("bases.second: invalid configuration:")
    assert f"{layer} (bases.second): train: " in text and "unknown key 'rnak'" in text


@pytest.mark.unit
def test_a_bad_inline_layer_and_a_missing_layer_file_are_named(monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = config.yaml_file("config.yaml")
    cfg["bases"] = {"early": {"generation": {"steps": 0}}}
    with pytest.raises(config.ConfigError, match=r"^bases.early: invalid configuration:\n  bases.early: "
                                                 r"generation.steps: 0 is out of range"):
        bases.studies(cfg, _layers(cfg))
    cfg["bases"] = {"late": "config/bases/no-such.yaml"}
    with pytest.raises(config.ConfigError, match=r"bases.late: layer file 'config/bases/no-such.yaml' not found"):
        bases.studies(cfg, _layers(cfg))
    cfg["bases"] = {"nested": {"bases": {"x": {}}}}
    with pytest.raises(config.ConfigError, match=r"cannot set `bases`"):
        bases.studies(cfg, _layers(cfg))


@pytest.mark.unit
def test_a_list_of_layers_merges_in_order_and_names_the_layer_that_set_a_key(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    cfg = config.yaml_file("config.yaml")
    mine = tmp_path / "my-paths.yaml"
    mine.write_text("train: {seeds: [7]}\n")
    cfg["bases"] = {"more-seeds": ["config/seeds3.yaml", str(mine), {"train": {"rank": 8}}]}
    [study] = bases.studies(cfg, _layers(cfg))
    assert study.config["train"]["seeds"] == [7] and study.config["train"]["rank"] == 8
    assert study.config["arms"] == cfg["arms"]  # what no layer sets is the common config's
    assert study.layers.source_of(("train", "seeds")) == f"{mine} (bases.more-seeds)"
    assert study.layers.where_set(("train", "rank")) == "bases.more-seeds.train.rank in config.yaml"
    assert study.source == f"config/seeds3.yaml, {mine}, bases.more-seeds"
    cfg["bases"] = {"none": []}
    with pytest.raises(config.ConfigError, match=r"^bases.none: an empty list of layers"):
        bases.studies(cfg, _layers(cfg))


@pytest.mark.unit
def test_each_base_gets_its_own_merged_config_and_results_folder(monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = config.yaml_file("config.yaml")
    cfg["bases"] = {"embedded": {}, "more-seeds": "config/seeds3.yaml"}
    found = bases.studies(cfg, _layers(cfg))
    assert [s.name for s in found] == ["embedded", "more-seeds"]
    assert found[0].config["train"]["seeds"] == [42] and found[1].config["train"]["seeds"] == [42, 43, 44]
    assert "bases" not in found[1].config
    assert found[1].results == "results/bases/more-seeds" and found[1].module == "base_more_seeds"
    assert found[1].in_results("results/adapters/x") == "results/bases/more-seeds/adapters/x"
    assert found[1].in_results("data/base") == "data/base"
    assert found[1].layers.source_of(("train", "seeds")) == "config/seeds3.yaml (bases.more-seeds)"


@pytest.mark.unit
def test_remote_code_is_refused_under_transformers_5_naming_the_base_and_the_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    remote = tmp_path / "llada"
    shutil.copytree(REPO / "data" / "base", remote)
    raw = json.loads((remote / "config.json").read_text())
    (remote / "config.json").write_text(json.dumps(raw | {"auto_map": {"AutoModel": "modeling_llada.LLaDAModelLM"}}))
    cfg = config.yaml_file("config.yaml")
    cfg["bases"] = {"embedded": {}, "llada": {"base": {"path": str(remote), "trust_remote_code": True}}}
    found = bases.studies(cfg, _layers(cfg))
    with pytest.raises(config.ConfigError, match=r"bases.llada: .* ships modelling code \(modeling_llada.LLaDAModelLM\)"
                                                 r" written for transformers 4.38-4.46; this run has transformers "
                                                 r"5.2.0(.|\n)*\.venv-remote/bin/snakemake"):
        bases.refuse_unloadable(found, "5.2.0")
    bases.refuse_unloadable(found, "4.46.3")  # the 4.x environment loads both


def _brute_force_signflip(delta):
    """Every sign pattern, written out: the share whose |sum| reaches the observed one."""
    observed = abs(delta.sum())
    sums = [abs(sum(s * d for s, d in zip(signs, delta))) for signs in itertools.product((1, -1), repeat=len(delta))]
    return np.mean([s >= observed * (1 - 1e-9) for s in sums])


@pytest.mark.unit
def test_difference_of_effects_points_test_and_identity():
    rng = np.random.default_rng(0)
    ids = [f"q{i}" for i in range(9)]
    x = pd.DataFrame({"a": rng.uniform(0.3, 0.9, 9), "b": rng.uniform(0.2, 0.8, 9)}, index=ids)
    y = pd.DataFrame({"a": rng.uniform(0.3, 0.9, 9), "b": rng.uniform(0.2, 0.8, 9)}, index=ids)
    out = crossbase.pair_difference(x, y, resamples=2000, confidence=0.9, seed=5, permutations=100)
    rx, ry = x["a"].mean() / x["b"].mean(), y["a"].mean() / y["b"].mean()
    assert out["ratio_x"] == pytest.approx(rx) and out["ratio_of_ratios"] == pytest.approx(rx / ry)
    dod = (x["a"] - x["b"]).mean() - (y["a"] - y["b"]).mean()
    assert out["diff_of_diffs"] == pytest.approx(dod) and out["dod_lo"] < dod < out["dod_hi"]
    assert out["ror_lo"] < rx / ry < out["ror_hi"]
    delta = ((x["a"] - x["b"]) - (y["a"] - y["b"])).to_numpy()
    assert out["perm_exact"] and out["p_signflip"] == pytest.approx(_brute_force_signflip(delta))
    same = crossbase.pair_difference(x, x, resamples=500, confidence=0.9, seed=5, permutations=100)
    assert (same["ratio_of_ratios"], same["ror_lo"], same["ror_hi"]) == (1.0, 1.0, 1.0)
    assert (same["diff_of_diffs"], same["dod_lo"], same["dod_hi"], same["p_signflip"]) == (0.0, 0.0, 0.0, 1.0)


@pytest.mark.unit
def test_every_pair_of_bases_shares_one_resample_of_the_queries():
    """Three bases: the pairs' bootstrap draws are one resample, so (X-Y) + (Y-Z) = (X-Z) draw by draw; the
    percentile intervals of such sums need not add, but the points and a shift by a constant do."""
    rng = np.random.default_rng(1)
    ids = [f"q{i}" for i in range(30)]
    frames = {n: pd.DataFrame({"a": rng.uniform(0, 1, 30), "b": rng.uniform(0, 1, 30)}, index=ids) for n in "XYZ"}
    shifted = frames["X"].assign(a=frames["X"]["a"] + 0.1)
    out = crossbase.differences({"c": {**frames, "W": shifted}}, resamples=400, confidence=0.95, seed=3,
                                permutations=500)
    pairs = {(r.base_x, r.base_y): r for r in out.itertuples()}
    assert len(out) == 6 and list(out.columns) == report_bases.DIFFERENCES_SCHEMA.names
    assert pairs[("X", "Y")].diff_of_diffs + pairs[("Y", "Z")].diff_of_diffs == pytest.approx(
        pairs[("X", "Z")].diff_of_diffs)
    # W is X with a shifted by 0.1 on every query: the interval moves by exactly 0.1 (same resamples)
    xw, xy = pairs[("X", "W")], pairs[("X", "Y")]
    assert (xw.diff_of_diffs, xw.dod_lo, xw.dod_hi) == pytest.approx((-0.1, -0.1, -0.1))
    assert xy.dod_lo < xy.diff_of_diffs < xy.dod_hi


@pytest.mark.unit
def test_only_comparisons_every_base_defines_alike_are_compared():
    one = [{"name": "h", "a": "anchor", "b": "random", "split": "held_out"},
           {"name": "i", "a": "anchor", "b": "random", "split": "in_domain"}]
    two = [{"name": "h", "a": "anchor", "b": "random", "split": "held_out"},
           {"name": "i", "a": "anchor", "b": "base", "split": "in_domain"}]
    assert [c["name"] for c in crossbase.shared_comparisons({"x": one, "y": two})] == ["h"]


# ------------------------------------------------------------------------------------------ workflow

@pytest.mark.workflow
def test_two_bases_plan_every_stage_per_base_and_the_cross_base_outputs(repo_copy, default_dag, tmp_path):
    second = tmp_path / "second-base"
    shutil.copytree(REPO / "data" / "base", second)
    layer = tmp_path / "bases.yaml"
    layer.write_text(yaml.safe_dump({"bases": {"first": {}, "second": {"base": {"path": str(second)}}}}))
    proc = snakemake(repo_copy, "-n", f"--configfile={layer}")
    jobs = dry_run_jobs(repo_copy, f"--configfile={layer}")
    for name in ("first", "second"):
        per_base = {rule[len(f"base_{name}_"):]: n for rule, n in jobs.items() if rule.startswith(f"base_{name}_")}
        assert per_base == {r: n for r, n in default_dag.items() if r != "all"}
    assert {r: n for r, n in jobs.items() if not r.startswith("base_")} == {
        "compare_bases": 1, "bases_figure": 1, "bases_paper": 1, "all": 1}
    out = proc.stdout + proc.stderr
    outputs = re.findall(r"^\s+output: (.+)$", out, flags=re.M)
    paths = [p for line in outputs for p in line.split(", ")]
    assert "results/tables/bases.md" in paths and "results/figures/bases.pdf" in paths
    assert "results/bases/first/tables/headline.md" in paths and "results/bases/second/adapters/" \
        "anchor_full_n144_s300_seed42" in paths
    stray = [p for p in paths if not p.startswith("results/bases/") and not re.match(
        r"results/(tables/bases|tables/bases_differences|figures/bases|report/paper)\.", p)]
    assert not stray, stray


@pytest.mark.workflow
def test_a_wrong_hash_in_a_bases_layer_names_that_layer_and_key(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    (repo / "late.yaml").write_text(yaml.safe_dump({"base": {"sha256": "1" * 64}}))
    (repo / "study.yaml").write_text(yaml.safe_dump({"bases": {"early": {"base": {"sha256": "0" * 64}},
                                                               "late": "late.yaml"}}))
    proc = snakemake(repo, "--cores", "1", "--keep-going", "--configfile=study.yaml",
                     "results/bases/early/base/verified.json", "results/bases/late/base/verified.json", check=False)
    assert proc.returncode != 0
    logs = {name: (repo / "results" / "bases" / name / "logs" / "verify_base.log").read_text()
            for name in ("early", "late")}
    assert "mismatch for bases.early.base.sha256 in study.yaml" in logs["early"]
    assert "mismatch for base.sha256 in late.yaml" in logs["late"]
    assert not list((repo / "results").rglob("verified.json"))


@pytest.mark.workflow
def test_without_bases_no_job_reads_or_writes_under_results_bases(repo_copy):
    proc = snakemake(repo_copy, "-n")
    assert "results/bases/" not in proc.stdout + proc.stderr
    assert "base_" not in "".join(re.findall(r"^rule (\S+):", proc.stdout, flags=re.M))


@pytest.mark.workflow
def test_a_layer_with_an_unknown_key_stops_the_dag_build(repo_copy, tmp_path):
    layer = tmp_path / "broken.yaml"
    layer.write_text("generation: {stepz: 4}\n")
    bases_file = tmp_path / "bases.yaml"
    bases_file.write_text(yaml.safe_dump({"bases": {"first": {}, "broken": str(layer)}}))
    proc = snakemake(repo_copy, "-n", f"--configfile={bases_file}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"bases.broken: invalid configuration:\n  {layer} (bases.broken): generation: " in out
    assert "unknown key 'stepz'" in out


@pytest.mark.workflow
def test_a_family_the_running_transformers_cannot_load_is_refused_at_dag_build(repo_copy, tmp_path):
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("the 4.x environment loads every family")
    base = BUILDERS["llada"](tmp_path / "llada")
    bases_file = tmp_path / "bases.yaml"
    bases_file.write_text(yaml.safe_dump({"bases": {"embedded": {}, "llada": {"base": {
        "path": str(base), "sha256": checksum.directory_sha256(base), "trust_remote_code": True,
        "device": "cpu"}, "generation": {"answer_len": 24}}}}))
    proc = snakemake(repo_copy, "-n", f"--configfile={bases_file}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "bases.llada: " in out and "ships modelling code" in out
    assert "bash .ci/setup remote" in out and "bases.embedded" not in out


# --------------------------------------------------------------------------------- end to end (slow)

def reduced_study(repo, bases_block):
    """The reduced study of tests/test_family_study.py (three arms, one held-out domain, four queries a
    domain, two training jobs a base) with ``bases_block`` as its `bases:`."""
    cfg = yaml.safe_load((repo / "config.yaml").read_text())
    cfg["data"].update(held_out=["astronomy"], max_queries_per_domain=4, alt_queries_dir=None)
    cfg["train"].update(batch_size=4, warmup_steps=1, log_every=5, default={"size": 8, "steps": 3})
    cfg["arms"] = {a: cfg["arms"][a] for a in ("base", "anchor", "random")}
    cfg["sweep"] = {"strategies": ["anchor", "random"], "sizes": [8], "steps": [3]}
    cfg["generation"].update(answer_len=24, steps=3, batch_size=16)
    cfg["statistics"].update(resamples=300, sweep_report={}, comparisons={
        "heldout_anchor_vs_random": {"a": "anchor", "b": "random", "split": "held_out"},
        "indomain_anchor_vs_random": {"a": "anchor", "b": "random", "split": "in_domain"},
        "heldout_anchor_vs_base": {"a": "anchor", "b": "base", "split": "held_out"}})
    cfg["probes"] = {"maskcount_k": [0], "attention_arms": []}
    cfg["bases"] = bases_block
    (repo / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return cfg


def check_cross_base_tables(results, names, comparisons):
    """bases.parquet and bases_differences.parquet against numbers recomputed here from each base's own
    generations table (pandas, no project statistics code), and each base's ratio against its headline."""
    table = tables.read_parquet(results / "tables" / "bases.parquet")
    diffs = tables.read_parquet(results / "tables" / "bases_differences.parquet")
    effects = {}
    for name in names:
        gens = pd.read_parquet(results / "bases" / name / "tables" / "generations.parquet")
        headline = (results / "bases" / name / "tables" / "headline.md").read_text()
        for comp in comparisons:
            rows = gens[(gens["query_set"] == "main") & (gens["split"] == comp["split"])]
            means = rows.groupby(["arm", "query_id"])["overlap"].mean().unstack("arm")
            a, b = means[comp["a"]], means[comp["b"]]
            effects[(name, comp["name"])] = (a.mean() / b.mean(), (a - b).mean())
            row = table[(table["base"] == name) & (table["comparison"] == comp["name"])].iloc[0]
            assert row["ratio"] == pytest.approx(a.mean() / b.mean()) and row["n"] == len(a)
            line = next(li for li in headline.splitlines() if li.startswith(f"| {comp['name']} |"))
            assert f"{row['ratio']:.2f}x [{row['ratio_lo']:.2f}, {row['ratio_hi']:.2f}]" in line
    for x, y in itertools.combinations(names, 2):
        for comp in comparisons:
            got = diffs[(diffs["base_x"] == x) & (diffs["base_y"] == y) & (diffs["comparison"] == comp["name"])].iloc[0]
            (rx, dx), (ry, dy) = effects[(x, comp["name"])], effects[(y, comp["name"])]
            assert got["ratio_of_ratios"] == pytest.approx(rx / ry, nan_ok=True)
            assert got["diff_of_diffs"] == pytest.approx(dx - dy) and got["dod_lo"] <= dx - dy <= got["dod_hi"]
    markdown = (results / "tables" / "bases.md").read_text()
    assert all(f"| {c['name']} | {names[0]} | {names[1]} |" in markdown for c in comparisons)
    return table


@pytest.fixture(scope="module")
def two_base_study(tmp_path_factory):
    """The reduced study on the embedded base twice: as configured, and trained with another seed."""
    repo = copy_repo(tmp_path_factory.mktemp("two_bases"))
    cfg = reduced_study(repo, {"first": {}, "reseeded": {"train": {"seeds": [7]}}})
    snakemake(repo, "--cores", "2")
    return repo, cfg


@pytest.mark.slow
def test_cross_base_tables_equal_each_bases_own_numbers(two_base_study):
    repo, cfg = two_base_study
    results = repo / "results"
    table = check_cross_base_tables(results, ["first", "reseeded"], config.comparisons(cfg))
    assert set(table["family"]) == {"bert"} and set(table["parameters"]) == {5_364_224}
    assert (results / "figures" / "bases.png").stat().st_size > 0
    page = (results / "report" / "paper.html").read_text()
    assert "Across bases" in page and "results/bases/reseeded/report/paper.html" in page


CROSS_BASE_JOBS = ("compare_bases", "bases_figure", "bases_paper", "all")


def jobs_planned_only_for(repo, tmp_path, name, layer):
    """The dry run's jobs with ``bases: {name: layer}`` layered over the finished run; every one is that
    base's or a cross-base job."""
    overlay = tmp_path / f"{name}.yaml"
    overlay.write_text(yaml.safe_dump({"bases": {name: layer}}))
    jobs = dry_run_jobs(repo, f"--configfile={overlay}")
    prefix = f"base_{name.replace('-', '_')}_"
    assert jobs and all(r.startswith(prefix) or r in CROSS_BASE_JOBS for r in jobs), jobs
    return jobs


@pytest.mark.slow
def test_adding_a_base_plans_only_its_jobs_and_the_cross_base_outputs(two_base_study, tmp_path):
    jobs = jobs_planned_only_for(two_base_study[0], tmp_path, "third", {"generation": {"seed": 99}})
    assert jobs["base_third_train_adapter"] == 2 and jobs["compare_bases"] == 1


@pytest.mark.slow
def test_editing_one_bases_layer_reruns_only_that_base(two_base_study, tmp_path):
    jobs = jobs_planned_only_for(two_base_study[0], tmp_path, "reseeded", {"generation": {"seed": 4321}})
    assert "base_reseeded_train_adapter" not in jobs and jobs["base_reseeded_generate_arm"] == 3


@pytest.mark.slow
def test_a_bert_and_a_llada_base_in_one_run(tmp_path):
    """Two families in one run, in the environment that loads both (CI's transformers 4.x stage)."""
    if not remote_code_runs():
        pytest.skip("LLaDA's modelling code needs transformers 4.x (.venv-remote)")
    llada = BUILDERS["llada"](tmp_path / "llada")
    repo = copy_repo(tmp_path / "repo")
    cfg = reduced_study(repo, {
        "bert": {},  # the embedded base, BERT's layout (the tests' own tiny BERT needs transformers 5 to build)
        "llada": {"base": {"path": str(llada), "sha256": checksum.directory_sha256(llada), "device": "cpu",
                           "trust_remote_code": True}}})
    snakemake(repo, "--cores", "2")
    table = check_cross_base_tables(repo / "results", ["bert", "llada"], config.comparisons(cfg))
    assert dict(zip(table["base"], table["family"])) == {"bert": "bert", "llada": "llada"}


@pytest.mark.workflow
def test_the_llada_dream_comparison_dry_runs_with_tiny_stand_ins(tmp_path):
    """config/compare/llada-dream.yaml as shipped, its four layers pointed at tiny checkpoints of their families."""
    if not remote_code_runs():
        pytest.skip("LLaDA's and Dream's modelling code needs transformers 4.x (.venv-remote)")
    repo = copy_repo(tmp_path / "repo")
    compare = yaml.safe_load((repo / "config" / "compare" / "llada-dream.yaml").read_text())
    for name, layer_file in compare["bases"].items():
        layer = yaml.safe_load((repo / layer_file).read_text())
        stand_in = BUILDERS[layer["base"]["family"]](tmp_path / name)
        layer["base"].update(path=str(stand_in), sha256=checksum.directory_sha256(stand_in))
        (repo / layer_file).write_text(yaml.safe_dump(layer))
    jobs = dry_run_jobs(repo, "--configfile=config/compare/llada-dream.yaml")
    assert {r.split("_")[1] for r in jobs if r.startswith("base_")} == {"llada", "dream"}
    assert sum(1 for r in jobs if r.endswith("_verify_base")) == 4 and jobs["compare_bases"] == 1


@pytest.mark.workflow
def test_the_llada_dream_comparison_takes_a_users_paths_without_copying_the_shipped_layers(repo_copy, tmp_path):
    """Each base of config/compare/llada-dream.yaml as [its shipped layer, the user's own with the paths]."""
    if not remote_code_runs():
        pytest.skip("LLaDA's and Dream's modelling code needs transformers 4.x (.venv-remote)")
    compare = yaml.safe_load((REPO / "config" / "compare" / "llada-dream.yaml").read_text())
    mine = {}
    for name, layer_file in compare["bases"].items():
        family = yaml.safe_load((REPO / layer_file).read_text())["base"]["family"]
        stand_in = BUILDERS[family](tmp_path / name)
        mine[name] = [layer_file, {"base": {"path": str(stand_in), "sha256": checksum.directory_sha256(stand_in)}}]
    paths = tmp_path / "my-paths.yaml"
    paths.write_text(yaml.safe_dump({"bases": mine}))
    jobs = dry_run_jobs(repo_copy, "--configfile", "config/compare/llada-dream.yaml", str(paths))
    assert sum(1 for r in jobs if r.endswith("_verify_base")) == 4 and jobs["compare_bases"] == 1


@pytest.mark.workflow
def test_an_8b_base_and_the_embedded_base_in_one_run_ask_slurm_for_their_own_memory(repo_copy, tmp_path):
    """Each base's model jobs carry the memory model's requests for that base (no weights needed for the plan)."""
    from bench import scale

    big = tmp_path / "big"
    big.mkdir()
    (big / "config.json").write_text(json.dumps(scale.LLADA_8B))
    bases_file = tmp_path / "bases.yaml"
    bases_file.write_text(yaml.safe_dump({"bases": {"embedded": {}, "big": {"base": {"path": str(big),
                                                                                      "device": "cuda"}}}}))
    proc = snakemake(repo_copy, "-n", f"--configfile={bases_file}", "--",
                     "results/bases/embedded/adapters/anchor_full_n144_s300_seed42",
                     "results/bases/big/adapters/anchor_full_n144_s300_seed42")
    text = proc.stdout + proc.stderr
    asked = {name: int(mem)
             for name, mem in re.findall(r"rule base_(\w+?)_train_adapter:.*?\bmem_mb=(\d+)", text, re.S)}
    gpu = {name: int(mem)
           for name, mem in re.findall(r"rule base_(\w+?)_train_adapter:.*?\bgpu_mem_mb=(\d+)", text, re.S)}
    assert asked["embedded"] == 4000 and asked["big"] > asked["embedded"]
    assert gpu["big"] > 16 * 1024 > gpu.get("embedded", 0)
