"""The benchmark helpers compute what they claim, on tiny inputs (no timing is asserted here)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from anchormask.model import backbone as bb
from anchormask.model import layout
from anchormask.model import memory as memory_model
from anchormask.settings import config as study_config
from anchormask.settings import layers as config_layers
from anchormask.training import masking, strategies, train
from bench import common, e2e, flops, memory, scale, scale_job, stats
from bench.common import Line
from bench.reference import reference_train_step
from helpers import tiny_train_settings

pytestmark = pytest.mark.unit

PAIRS = [("Which river flows into the sea?", "The river flows north into the sea."),
         ("What is the deepest lake?", "The deepest lake in the world is in the north of the country."),
         ("Where is the capital?", "The capital is in the south.")]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: tiny ops on a shared machine otherwise wait on each other's barriers."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def encoded(backbone):
    return [layout.encode_pair(backbone.tokenizer, q, a, 64) for q, a in PAIRS]


def test_flop_counts_match_torch_flop_counter(tiny_model_dir):
    from torch.utils.flop_counter import FlopCounterMode

    runtime = bb.pick_runtime("cpu")
    backbone = bb.load_backbone(tiny_model_dir, runtime=runtime, attn_implementation="eager")  # countable attention
    backbone.model.eval()
    shape = flops.Shape.of(backbone.model)
    ids = torch.randint(5, 40, (3, 11))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        hidden = backbone.hidden_states(ids, torch.ones_like(ids))
        backbone.logits_from_hidden(hidden[:, :5].reshape(-1, shape.hidden))
    assert counter.get_total_flops() == flops.forward(shape, 3, 11, 15)

    settings = tiny_train_settings()
    torch.manual_seed(0)
    train.attach_lora(backbone, "full", settings)
    batch = encoded(backbone)
    with FlopCounterMode(display=False) as counter:
        loss, info = train.train_step(backbone, runtime, batch, strategies.resolve("anchor"),
                                      settings, masking.MaskRatio(0.5, 0.9),
                                      torch.Generator().manual_seed(1))
        loss.backward()
    width = max(len(e.input_ids) for e in batch)
    assert counter.get_total_flops() == flops.train_step(shape, len(batch), width, info["masked_tokens"],
                                                         rank=settings["rank"], targets="full")


@pytest.mark.parametrize("strategy", ["anchor", "random"])
def test_reference_train_step_computes_the_project_loss(tiny_backbone, strategy):
    backbone, runtime = tiny_backbone
    batch = encoded(backbone)
    width = max(len(e.input_ids) for e in batch)  # L = the batch's longest: both draw the same mask
    settings = tiny_train_settings()
    with torch.no_grad():
        loss, info = train.train_step(backbone, runtime, batch, strategies.resolve(strategy),
                                      settings, masking.MaskRatio(0.5, 0.9),
                                      torch.Generator().manual_seed(3))
        ref, masked = reference_train_step(backbone.model, batch, seq_len=width, strategy=strategy, low=0.5, high=0.9,
                                           mask_id=backbone.mask_token_id, pad_id=backbone.tokenizer.pad_token_id,
                                           generator=torch.Generator().manual_seed(3))
    assert masked == info["masked_tokens"] > 0
    assert torch.allclose(loss, ref, atol=1e-5, rtol=1e-5)


def test_reference_train_step_pads_to_the_configured_length(tiny_backbone):
    backbone, _ = tiny_backbone
    seen = {}

    def spy(input_ids, attention_mask):
        seen["shape"] = tuple(input_ids.shape)
        return backbone.model(input_ids=input_ids, attention_mask=attention_mask)

    reference_train_step(spy, encoded(backbone), seq_len=40, strategy="anchor", low=0.5, high=0.9,
                         mask_id=backbone.mask_token_id, pad_id=0, generator=torch.Generator().manual_seed(0))
    assert seen["shape"] == (len(PAIRS), 40)


def test_bootstrap_helpers_agree_with_scipy_within_monte_carlo_error():
    rng = np.random.default_rng(0)
    a, b = rng.beta(4, 6, 30), rng.beta(3, 6, 30)
    pairs = [{"name": "x", "query_ids": [f"q{i}" for i in range(30)], "a": a, "b": b}]
    core = stats.core_batches(pairs, 4000, 0.95, 1)[0]
    res = stats.scipy_one(a, b, 4000, 0.95, np.random.default_rng(2))
    assert core["ratio"] == pytest.approx(a.mean() / b.mean()) and core["diff"] == pytest.approx(a.mean() - b.mean())
    assert stats.agreement(core, res, 4000, 0.95)["max_z"] < stats.TOLERANCE_SIGMAS
    shifted = core | {"ratio_lo": core["ratio_lo"] - 0.2}  # far outside Monte-Carlo error
    assert stats.agreement(shifted, res, 4000, 0.95)["max_z"] > stats.TOLERANCE_SIGMAS


def test_percentile_standard_error_matches_the_normal_theory():
    draws = np.random.default_rng(0).normal(size=20000)
    # sqrt(p (1 - p) / R) / phi(z_p) for p = 0.025
    theory = np.sqrt(0.025 * 0.975 / 20000) / (np.exp(-1.959964 ** 2 / 2) / np.sqrt(2 * np.pi))
    assert stats.percentile_se(draws, 0.025, 20000) == pytest.approx(theory, rel=0.2)


def test_synthetic_generations_have_the_studys_shape():
    from anchormask.stats import pairwise

    cfg = common.load_config()
    df = stats.synthetic_generations(cfg)
    assert df["query_id"].nunique() == 63 and set(df["arm"]) == set(cfg["arms"])
    out = pairwise.run_comparisons(df, study_config.comparisons(cfg), 200, 0.95, 1)
    assert len(out) == len(cfg["statistics"]["comparisons"]) and (out["n"] >= 12).all()


def test_line_ratio_and_status():
    assert Line("x", 3.0, "x", 2.0).ratio == 1.5 and Line("x", 3.0, "x", 2.0).status == "PASS"
    assert Line("x", 1.0, "x", 2.0).status == "MISS"
    assert (Line("t", 4.0, "s", 5.0, higher=False).ratio == 1.25
            and Line("t", 6.0, "s", 5.0, higher=False).status == "MISS")
    assert Line("i", 1.0, "MiB").status == "INFO" and "INFO" in Line("i", 1.0, "MiB").format()


def test_rss_launcher_reads_its_one_childs_peak():
    code = "x = bytearray(b'\\x01') * (200 << 20)"
    out = subprocess.run([sys.executable, "-m", "bench._rss", sys.executable, "-c", code], cwd=common.REPO,
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["rc"] == 0 and 200 <= result["maxrss_mib"] < 400


def test_memory_estimate_adds_up():
    est = memory.estimate_13b(batch=8, seq_len=64, rank=16, lora_kinds="qkvo", answer_len=48, gen_batch=64)
    arch, t = est["architecture"], est["training"]
    assert 1.2e9 < arch["parameters"] < 1.4e9
    assert arch["lora_parameters"] == 20 * 4 * 16 * (2048 + 2048)
    parts = t["weights_gib"] + t["lora_states_gib"] + t["activations_gib"] + t["logits_gib"] + t["workspace_gib"]
    assert t["total_gib"] == pytest.approx(parts, abs=0.01)
    assert t["weights_gib"] == pytest.approx(2 * arch["parameters"] / 1024 ** 3, abs=1e-3)


@pytest.mark.parametrize("name", ["llada-8b", "dream-7b", "report-1.3b"])
def test_memory_model_counts_the_real_architectures_parameters(name):
    """Built on the meta device (no memory) with the family's modelling code from config.json's values."""
    family, raw, _ = scale.SHAPES[name]
    model_cls, config_cls, context = scale_job.family_classes(family)
    with context(), torch.device("meta"):
        model = model_cls(config_cls(**raw))
    counted = sum(p.numel() for p in model.parameters())
    if raw.get("weight_tying"):  # the tests' LLaDA code keeps its own head; a tied checkpoint shares it
        counted -= raw["embedding_size"] * raw["d_model"]
    assert memory_model.Shape.from_config(raw).parameters == pytest.approx(counted, rel=1e-3)


LAYER_SHAPES = {"llada-8b-base": scale.LLADA_8B, "llada-8b-instruct": scale.LLADA_8B, "dream-7b-base": scale.DREAM_7B,
                "dream-7b-instruct": scale.DREAM_7B, "report-1.3b": scale.LLADA_1P3B}


@pytest.mark.parametrize("layer", sorted(LAYER_SHAPES))
def test_cluster_requests_of_each_base_layer_come_from_the_memory_model(layer, tmp_path):
    """config/bases/LAYER.yaml over config.yaml, with a config.json-only stand-in of the checkpoint."""
    assert sorted(p.stem for p in (common.REPO / "config" / "bases").glob("*.yaml")) == sorted(LAYER_SHAPES)
    (tmp_path / "config.json").write_text(json.dumps(LAYER_SHAPES[layer]))
    cfg = scale.study_config(f"config/bases/{layer}.yaml")
    cfg["base"]["path"] = str(tmp_path)
    shape, settings = memory_model.Shape.from_config(LAYER_SHAPES[layer]), memory_model.job_settings(cfg)
    for kind, phase in (("train", "training"), ("generate", "generation")):
        requests = memory_model.job_requests(cfg, kind)
        gpu = memory_model.predict(shape, settings, "cuda")[phase]["total"]
        assert requests["gpu_mem_mb"] == math.ceil(gpu * memory_model.MARGIN / 2 ** 20)
        assert requests["gpu_mem_mb"] < 80_000  # each job of every layer fits one 80 GB GPU
        assert requests["mem_mb"] >= 4000 and requests["mem_mb"] * 2 ** 20 > 2 * shape.parameters  # bf16 pages


CARDS = {24_000: "config/cards/24gb.yaml", 40_000: None, 80_000: None}  # MB of GPU memory -> the layer it needs


@pytest.mark.parametrize("layer", sorted(LAYER_SHAPES))
@pytest.mark.parametrize("card", sorted(CARDS))
def test_every_base_layer_fits_every_card_with_the_cards_layer(layer, card, tmp_path):
    """What docs/real-bases.md and config/cards/ promise, by the memory model the SLURM requests come from."""
    assert max(card_requests(layer, card, tmp_path)) <= card


def card_requests(layer: str, card: int, folder) -> list[int]:
    (folder / "config.json").write_text(json.dumps(LAYER_SHAPES[layer]))
    cfg = scale.study_config(f"config/bases/{layer}.yaml")
    if CARDS[card]:
        cfg = config_layers.merge(cfg, study_config.yaml_file(common.REPO / CARDS[card]))
    cfg["base"]["path"] = str(folder)
    return [memory_model.job_requests(cfg, kind)["gpu_mem_mb"] for kind in ("train", "generate")]


def test_the_docs_card_table_states_the_memory_models_requests(tmp_path):
    text = (common.REPO / "docs" / "real-bases.md").read_text()
    for card in CARDS:
        row = next(line for line in text.splitlines() if line.startswith(f"| {card // 1000} GB"))
        stated = [int(n) for pair in re.findall(r"(\d+) / (\d+) MB", row) for n in pair]
        assert stated == card_requests("llada-8b-base", card, tmp_path) + card_requests("dream-7b-instruct", card,
                                                                                       tmp_path), row


def test_checkpointing_shrinks_the_predicted_activations_by_the_layers_it_recomputes():
    shape = memory_model.Shape.from_config(scale.LLADA_8B)
    step = {kind: memory_model.training(shape, batch=8, seq_len=128, rank=16, checkpointing=kind)["activations"]
            for kind in (False, True, "one_in_two", "one_in_four", "fine_grained")}
    per_layer = step[False] // shape.layers
    assert step[True] == shape.layers * 8 * 128 * 2 * shape.hidden + per_layer  # inputs kept, one layer recomputed
    assert step[True] < step["one_in_two"] < step["one_in_four"] < step[False]
    assert step["fine_grained"] == pytest.approx(0.6 * step[False], rel=1e-6)


def test_cluster_requests_of_the_embedded_base():
    cfg = common.load_config()
    for kind in ("train", "generate"):
        requests = memory_model.job_requests(cfg, kind)
        assert requests["mem_mb"] == 4000 and 1000 < requests["gpu_mem_mb"] < 4000
    on_cpu = cfg | {"base": {**cfg["base"], "device": "cpu"}}
    assert memory_model.job_requests(on_cpu, "train") == {"mem_mb": 4000, "gpu_mem_mb": 0}


def test_sampler_bytes_per_logit_follow_the_decoding_options():
    assert memory_model.sampler_entry_bytes() == 8  # greedy, low confidence: the logits and their softmax
    dream = {"temperature": 0.2, "top_p": 0.95, "top_k": 0, "remasking": "entropy"}
    assert memory_model.sampler_entry_bytes(dream) == 28  # top_p's sort, order, softmax and cumsum


def test_model_line_is_within_the_tolerance_either_way_and_judges_nothing():
    assert scale.ModelLine("x", 1.1, "GiB", predicted=1.0).within_tolerance
    assert scale.ModelLine("x", 0.86, "GiB", predicted=1.0).within_tolerance
    assert not scale.ModelLine("x", 1.2, "GiB", predicted=1.0).within_tolerance
    assert scale.ModelLine("x", 1.2, "GiB", predicted=1.0).status == "INFO"
    assert "predicted" in scale.ModelLine("x", 1.2, "GiB", predicted=1.0).format()


def test_scale_job_runs_each_phase_on_a_tiny_llada_shape(tmp_path):
    raw = scale.LLADA_1P3B | {"d_model": 32, "n_heads": 2, "n_kv_heads": 2, "n_layers": 2, "mlp_hidden_size": 64}
    cfg = scale.study_config("config/bases/report-1.3b.yaml")
    cfg["train"] |= {"batch_size": 2, "seq_len": 16}
    cfg["generation"] |= {"batch_size": 2}
    path = scale.checkpoint("tiny", "llada", raw, tmp_path)
    spec = scale.job_spec("tiny", "llada", cfg, path, "cpu", 1)
    backbone, runtime, _ = scale_job.load(spec)
    shape = memory_model.Shape.of_checkpoint(path)
    norms = (2 * raw["n_layers"] + 1) * raw["d_model"]
    assert sum(p.numel() for p in backbone.model.parameters()) == shape.parameters + norms  # tied: one matrix
    step = scale_job.train_once(backbone, runtime, spec)
    assert step["masked"] > 0 and math.isfinite(step["loss"])
    backbone, runtime, _ = scale_job.load(spec)
    first = scale_job.generate_once(backbone, runtime, spec)
    assert first["masked"] == 2 * (cfg["generation"]["answer_len"] - 4) and first["width"] == 16 + 48


def test_copy_repo_without_git_copies_the_tree_less_outputs_and_environments(tmp_path):
    """A release archive (no .git), here unpacked inside someone else's git repository."""
    outer = tmp_path / "outer"
    release = outer / "anchormask-1.0"
    keep = ["Snakefile", "config.yaml", "data/base/config.json", "results/README.md", "bench/results/memory.json"]
    drop = ["results/tables/headline.md", ".venv/bin/python", ".venv-remote/lib/x.py", ".git/HEAD",
            ".snakemake/log/x.log", "src/anchormask/__pycache__/m.cpython-311.pyc", "src/x.egg-info/PKG-INFO"]
    for name in keep + drop:
        (release / name).parent.mkdir(parents=True, exist_ok=True)
        (release / name).write_text(name)
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    dest = common.copy_repo(tmp_path / "work" / "repo", root=release)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == sorted(keep)


def test_dag_benchmark_copy_works_from_a_copy_without_git(tmp_path):
    """The dag benchmark's copy step (common.copy_repo) from the repository as a release archive holds it."""
    release = common.copy_repo(tmp_path / "release")
    assert not (release / ".git").exists() and (release / "Snakefile").is_file()
    copy = common.copy_repo(tmp_path / "dag" / "repo", root=release)

    def files(root):
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files(copy) == files(release)


def test_dry_run_and_benchmark_tables_are_parsed(tmp_path):
    text = "Job stats:\njob    count\n---  -----\nall        1\ntrain     10\ntotal     11\n"
    assert common.job_counts(text) == {"all": 1, "train": 10}
    assert common.job_counts("Nothing to be done.") == {}
    header = "s\th:m:s\tmax_rss\tmax_vms\n"
    files = {"train/anchor_full_n16_s6_seed42.tsv": "10.5\t0:00:10\t300.0\t900\n",
             "train/random_full_n16_s6_seed42.tsv": "4.5\t0:00:04\t350.0\t900\n",
             "generate/anchor.tsv": "2.0\t0:00:02\t300.0\t900\n",
             "generate/sweep_anchor_n8_s3.tsv": "3.0\t0:00:03\t300.0\t900\n",
             "probes/maskcount_anchor.tsv": "5.0\t0:00:05\t300.0\t900\n",  # a rule defined inside an `if`
             "probes/lora.tsv": "0.5\t0:00:00\t200.0\t900\n",
             "verify_base.tsv": "1.0\t0:00:01\tNA\tNA\n",
             "unknown/x.tsv": "1.0\t0:00:01\tNA\tNA\n"}
    for name, row in files.items():
        (tmp_path / "benchmarks" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "benchmarks" / name).write_text(header + row)
    rules = e2e.breakdown(tmp_path)
    assert rules["train_adapter"] == {"jobs": 2, "s": 15.0, "max_rss_mib": 350.0}
    assert rules["generate_arm"]["s"] == 2.0 and rules["generate_sweep"]["s"] == 3.0
    assert rules["verify_base"]["s"] == 1.0 and rules["unknown"]["jobs"] == 1
    assert rules["probe_maskcount_generate"]["s"] == 5.0 and rules["probe_lora"]["s"] == 0.5
