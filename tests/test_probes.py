"""Mechanism probes: attention mass, LoRA weight allocation, mask-count summary, summary.md."""

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from anchormask import fileio
from anchormask.fileio import InputError
from anchormask.generation import arm_answers, sampler
from anchormask.measurement import tables
from anchormask.model import adapters, modeljob
from anchormask.model import backbone as bb
from anchormask.probes import attention, lora, maskcount
from anchormask.reporting import probe_figures, probe_markdown
from helpers import REPO, assert_one_pass_probe_equals_two_passes, cpu_base

ARM_ORDER = list(yaml.safe_load((REPO / "config.yaml").read_text())["arms"])  # the default study's arms

pytestmark = pytest.mark.unit

# --------------------------------------------------------------------------- attention mass


def attention_mass(attentions, answer_mask, prefix_mask, locked_mask) -> np.ndarray:
    """[layers, heads, 2]: ``attention_mass_rows`` averaged over the rows that have answer positions."""
    rows = attention.attention_mass_rows(attentions, answer_mask, prefix_mask, locked_mask)
    valid = torch.as_tensor(answer_mask).bool().any(1).cpu().numpy()
    if not valid.any():
        raise ValueError("no row has an answer position")
    return rows[valid].mean(0)


def _hand_attention():
    """One layer, two heads, batch 2, seq 5. Row 0: prefix {0, 1}, anchor {2}, answer {3, 4}.
    Row 1: prefix {0}, anchor {1, 2}, answer {3} (position 4 is not an answer position)."""
    att = torch.zeros(2, 2, 5, 5)
    # row 0, head 0: query 3 -> [.1 .2 .3 .4 0], query 4 -> [.5 0 .25 0 .25]
    att[0, 0, 3] = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.0])
    att[0, 0, 4] = torch.tensor([0.5, 0.0, 0.25, 0.0, 0.25])
    # row 0, head 1: all on the last key
    att[0, 1, 3:, 4] = 1.0
    # row 1, head 0: query 3 -> [.6 .1 .1 .2 0]; query 4 (not an answer position) -> all on the prefix
    att[1, 0, 3] = torch.tensor([0.6, 0.1, 0.1, 0.2, 0.0])
    att[1, 0, 4, 0] = 1.0
    # row 1, head 1: query 3 -> uniform
    att[1, 1, 3] = 0.2
    answer = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 1, 0]], dtype=torch.bool)
    prefix = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    anchor = torch.tensor([[0, 0, 1, 0, 0], [0, 1, 1, 0, 0]], dtype=torch.bool)
    return [att], answer, prefix, anchor


def test_attention_mass_matches_a_hand_computation():
    attentions, answer, prefix, anchor = _hand_attention()
    rows = attention.attention_mass_rows(attentions, answer, prefix, anchor)
    assert rows.shape == (2, 1, 2, 2)
    # row 0 head 0: prefix (0.3 + 0.5) / 2, anchor (0.3 + 0.25) / 2; head 1: nothing onto either
    np.testing.assert_allclose(rows[0, 0, 0], [0.4, 0.275])
    np.testing.assert_allclose(rows[0, 0, 1], [0.0, 0.0])
    # row 1: only query 3 counts; head 0 prefix 0.6, anchor 0.2; head 1 uniform: 0.2 and 0.4
    np.testing.assert_allclose(rows[1, 0, 0], [0.6, 0.2])
    np.testing.assert_allclose(rows[1, 0, 1], [0.2, 0.4])
    mass = attention_mass(attentions, answer, prefix, anchor)
    assert mass.shape == (1, 2, 2)
    np.testing.assert_allclose(mass[0], [[0.5, 0.2375], [0.1, 0.2]])


def test_attention_mass_skips_rows_without_answer_positions_and_checks_shapes():
    attentions, answer, prefix, anchor = _hand_attention()
    answer[1] = False
    mass = attention_mass(attentions, answer, prefix, anchor)
    np.testing.assert_allclose(mass[0], [[0.4, 0.275], [0.0, 0.0]])  # row 0 alone
    with pytest.raises(ValueError, match="no row has an answer position"):
        attention_mass(attentions, torch.zeros_like(answer), prefix, anchor)
    with pytest.raises(ValueError, match="layer 0"):
        attention_mass([attentions[0][:, :, :4, :4]], answer, prefix, anchor)


def test_observation_masks_follow_the_slot_layout():
    ids = torch.arange(10).repeat(2, 1)
    obs = sampler.Observation(step=0, input_ids=ids, attention_mask=torch.tensor([[1] * 10, [1] * 8 + [0] * 2]),
                              slot_start=torch.tensor([3, 2]), locked=torch.tensor([2, 1]), answer_len=5,
                              masked=torch.zeros(2, 10, dtype=torch.bool), query_ids=("a", "b"))
    answer, prefix, anchor = attention.observation_masks(obs)
    assert prefix[0].nonzero().flatten().tolist() == [0, 1, 2]
    assert anchor[0].nonzero().flatten().tolist() == [3, 4]
    assert answer[0].nonzero().flatten().tolist() == [5, 6, 7]
    assert prefix[1].nonzero().flatten().tolist() == [0, 1]
    assert anchor[1].nonzero().flatten().tolist() == [2]
    assert answer[1].nonzero().flatten().tolist() == [3, 4, 5, 6]


def test_attention_probe_on_a_tiny_model_gives_probabilities(tiny_model_dir, law_retrieval, tmp_path):
    base = cpu_base(tiny_model_dir)
    settings = sampler.SamplerSettings(answer_len=12, steps=3)
    df = attention.attention_table([{"arm": "base", "strategy": None, "targets": None, "adapters": []}],
                                [str(law_retrieval)], base, settings)
    assert len(df) == 2 * 2 * 2  # layers x heads x targets of the tiny BERT
    assert set(df["target"]) == {"prefix", "anchor"} and (df["queries"] == 3).all()
    assert ((df["mass"] > 0) & (df["mass"] <= 1)).all()
    total = df.groupby(["layer", "head"])["mass"].sum()
    assert (total <= 1 + 1e-9).all() and (total > 0).all()
    tables.write_parquet(df, tmp_path / "a.parquet", attention.ATTENTION_SCHEMA)
    back = tables.read_parquet(tmp_path / "a.parquet")
    assert back["mass"].tolist() == df["mass"].tolist()
    twin = df.assign(arm="anchor", strategy="anchor", targets="full", mass=df["mass"] * 0.5)
    probe_figures.attention_figure(pd.concat([df, twin], ignore_index=True), tmp_path / "a.pdf", tmp_path / "a.png",
                                   arm_order=ARM_ORDER)
    assert (tmp_path / "a.png").stat().st_size > 1000


@pytest.mark.parametrize("options", [{"batch_size": 2, "steps": 4}, {"cfg_scale": 1.0, "extra_masks": 2}],
                         ids=["padded-batches", "guided"])
def test_attention_probe_reads_the_sampler_s_own_pass(tiny_model_dir, law_retrieval, monkeypatch, options):
    base = cpu_base(tiny_model_dir)
    runtime = bb.pick_runtime("cpu")
    backbone = modeljob.load(base, runtime, attn_implementation="eager")  # as attention_table loads it
    requests = arm_answers.requests_for(backbone, fileio.read_jsonl(law_retrieval))
    assert len({len(r.prompt_ids) for r in requests}) > 1  # rows of one batch are padded
    settings = sampler.SamplerSettings(answer_len=12, **{"steps": 3, **options})
    assert_one_pass_probe_equals_two_passes(backbone, runtime, requests, settings, monkeypatch)


def test_attention_probe_states_unavailability_instead_of_failing(tiny_model_dir, law_retrieval, tmp_path,
                                                                    monkeypatch):
    def refuse(backbone, *args):
        raise attention.AttentionUnavailable("no probabilities from this model")

    monkeypatch.setattr(attention, "pass_attentions", refuse)
    base = cpu_base(tiny_model_dir)
    df = attention.attention_table([{"arm": "base", "strategy": None, "targets": None, "adapters": []}],
                                [str(law_retrieval)], base, sampler.SamplerSettings(answer_len=12, steps=3))
    assert df.empty and df.attrs["anchormask"]["not_available"] == {"base": "no probabilities from this model"}
    tables.write_parquet(df, tmp_path / "a.parquet", attention.ATTENTION_SCHEMA)
    back = tables.read_parquet(tmp_path / "a.parquet")
    assert back.attrs["anchormask"]["not_available"]["base"].startswith("no probabilities")
    probe_figures.attention_figure(back, tmp_path / "a.pdf", tmp_path / "a.png", arm_order=ARM_ORDER)
    assert (tmp_path / "a.png").stat().st_size > 1000
    text = probe_markdown.summary_markdown(None, back, None, None, {}, PATHS, arm_order=ARM_ORDER)
    assert "not available for this model" in text


# --------------------------------------------------------------------------- LoRA weight allocation


def _write_adapter(path, mats, r=2, alpha=6):
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"r": r, "lora_alpha": alpha, "peft_type": "LORA"}))
    save_file({k: torch.tensor(v, dtype=torch.float32).contiguous() for k, v in mats.items()},
              str(path / "adapter_model.safetensors"))
    (path / "provenance.json").write_text(json.dumps({"job": {"id": path.name}, "files": adapters.file_hashes(path)}))


def test_lora_norms_and_shares_from_known_matrices(tmp_path):
    rng = np.random.default_rng(0)
    prefix = "base_model.model.bert.encoder.layer"
    mats, expected = {}, {}
    for layer in (0, 1):
        for kind, leaf in (("q", "attention.self.query"), ("v", "attention.self.value"),
                           ("o", "attention.output.dense")):
            a, b = rng.normal(size=(2, 5)), rng.normal(size=(4, 2)) * (layer + 1)
            mats[f"{prefix}.{layer}.{leaf}.lora_A.weight"] = a
            mats[f"{prefix}.{layer}.{leaf}.lora_B.weight"] = b
            expected[(layer, kind)] = np.linalg.norm(3.0 * b.astype(np.float32) @ a.astype(np.float32))
    _write_adapter(tmp_path / "anchor_vo", mats)
    norms = lora.adapter_norms(tmp_path / "anchor_vo")
    assert (norms["scaling"] == 3.0).all() and (norms["rank"] == 2).all()
    got = {(int(r["layer"]), r["kind"]): r["fro_norm"] for r in norms.to_dict("records")}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-5)
    layers = lora.lora_layers_table([{"arm": "anchor", "strategy": "anchor", "targets": "full",
                                        "path": str(tmp_path / "anchor_vo")}])
    shares = lora.lora_share_table(layers).set_index("kind")
    total = sum(v ** 2 for v in expected.values())
    for kind in ("q", "v", "o"):
        sq = sum(v ** 2 for (layer, k), v in expected.items() if k == kind)
        assert shares.loc[kind, "share"] == pytest.approx(sq / total, rel=1e-5)
        assert shares.loc[kind, "fro_norm"] == pytest.approx(np.sqrt(sq), rel=1e-5)
    assert shares["share"].sum() == pytest.approx(1.0) and "k" not in shares.index
    probe_figures.lora_figure(layers, tmp_path / "l.pdf", tmp_path / "l.png", arm_order=ARM_ORDER)
    assert (tmp_path / "l.png").stat().st_size > 1000


def test_lora_probe_names_a_half_pair(tmp_path):
    _write_adapter(tmp_path / "bad", {"bert.encoder.layer.0.attention.self.key.lora_A.weight": np.ones((2, 3))})
    with pytest.raises(InputError, match="lacks lora_B"):
        lora.adapter_norms(tmp_path / "bad")


def test_lora_probe_on_a_trained_adapter(tiny_model_dir, tiny_pairs, tmp_path):
    from anchormask import study
    from anchormask.training import train
    from helpers import tiny_train_settings

    out = tmp_path / "anchor_vo_n6_s2_seed42"
    train.train(cpu_base(tiny_model_dir), str(tiny_pairs), study.AdapterJob("anchor", "vo", 6, 2, 42),
                tiny_train_settings(), str(out))
    norms = lora.adapter_norms(out)
    assert set(norms["kind"]) == {"v", "o"} and sorted(norms["layer"].unique()) == [0, 1]
    assert (norms["fro_norm"] > 0).all() and (norms["scaling"] == 2.0).all()


# --------------------------------------------------------------------------- mask count and summary


def _scored(levels):
    rows = []
    for (arm, k), level in levels.items():
        for q in range(6):
            split = "held_out" if q < 4 else "in_domain"
            rows.append({"arm": arm, "k": k, "query_id": f"q{q}", "domain": "law" if q < 4 else "in_domain",
                         "split": split, "overlap": level + 0.01 * q, "empty": False, "word_tokens": 10})
    return pd.DataFrame(rows)


def test_maskcount_summary_means_and_paired_differences():
    df = _scored({("anchor", 0): 0.5, ("anchor", 8): 0.3, ("random", 0): 0.2, ("random", 8): 0.2})
    out = maskcount.maskcount_summary(df, resamples=200, confidence=0.95, seed=1)
    held = out[out["split"] == "held_out"].set_index(["arm", "k"])
    assert held.loc[("anchor", 0), "mean"] == pytest.approx(0.515)
    assert held.loc[("anchor", 8), "diff"] == pytest.approx(-0.2)
    assert held.loc[("anchor", 8), "p_below_k0"] == 1.0  # every resample falls by exactly 0.2
    assert held.loc[("random", 8), "diff"] == pytest.approx(0.0) and held.loc[("random", 8), "p_below_k0"] == 0.0
    assert (held["n"] == 4).all() and set(out["split"]) == {"held_out", "in_domain", "all"}
    text = probe_markdown.maskcount_markdown(out)
    assert "| anchor | 8 | 4 |" in text


def test_maskcount_rejects_a_file_generated_with_another_k(tmp_path):
    path = tmp_path / "anchor_k8.jsonl"
    path.write_text(json.dumps({"arm": "anchor", "sampler": {"extra_masks": 0}}) + "\n")
    with pytest.raises(InputError, match="extra_masks = 8"):
        maskcount.maskcount_generations([("anchor", 8, str(path))], {})


# The paths probe_summary passes (PROBE_FILES in workflow/rules/probes.smk, from the rules' outputs).
PATHS = {
    "comparisons": "results/stats/comparisons.parquet",
    "attention": "results/probes/attention.parquet",
    "attention_figure": "results/probes/attention.pdf",
    "lora": "results/probes/lora_shares.parquet",
    "lora_layers": "results/probes/lora_norms.parquet",
    "lora_figure": "results/probes/lora_norms.pdf",
    "maskcount": "results/probes/maskcount.parquet",
    "maskcount_md": "results/probes/maskcount.md",
    "maskcount_figure": "results/probes/maskcount.pdf",
    "ablation": "results/figures/ablation.pdf",
}


def test_summary_names_reverse_vs_random_and_the_ablation_figure():
    comp = pd.DataFrame([{"name": "heldout_reverse_vs_random", "selector": "split=held_out", "n": 12, "a": "reverse",
                          "b": "random", "mean_a": 0.2, "mean_b": 0.25, "diff": -0.05, "diff_lo": -0.08,
                          "diff_hi": -0.01, "ratio": 0.8, "ratio_lo": 0.7, "ratio_hi": 0.95, "p_a_gt_b": 0.01,
                          "report": "diff -0.038, P(a>b) = 0.006"}])
    text = probe_markdown.summary_markdown(comp, None, None, None,
                                           {"reverse": {"strategy": "reverse", "targets": "full"},
                                            "random": {"strategy": "random", "targets": "full"}},
                                           PATHS, arm_order=ARM_ORDER)
    assert "heldout_reverse_vs_random" in text and "diff -0.050" in text
    assert "results/figures/ablation.pdf" in text


def test_probes_smk_passes_the_lint_pattern():
    text = (REPO / "workflow" / "rules" / "probes.smk").read_text()
    assert re.search(r"rule .+?:", text)
    assert not re.search(r"def .+?:", text), "snakemake --lint flags a .smk with both a def and a rule"


def test_summary_headlines_have_one_line_per_probe():
    att = pd.DataFrame([{"arm": a, "strategy": s, "targets": None, "layer": 0, "head": 0, "target": t, "mass": m}
                        for a, s, base in (("base", None, 0.1), ("anchor", "anchor", 0.3))
                        for t, m in (("prefix", 0.5), ("anchor", base))])
    shares = pd.DataFrame([{"arm": "anchor", "targets": "full", "kind": k, "share": v, "fro_norm": 1.0}
                         for k, v in zip("qkvo", (0.1, 0.2, 0.3, 0.4))])
    text = probe_markdown.summary_markdown(None, att, shares, None, {}, PATHS, arm_order=ARM_ORDER)
    head = text.split("## Headlines (one line per probe)")[1].split("## 1.")[0]
    bullets = [line for line in head.splitlines() if line.startswith("- ")]
    assert len(bullets) == 5
    assert "anchor 0.300 (+0.2000)" in bullets[1] and "anchor 0.700" in bullets[2]
    assert "ablation.pdf" in bullets[3] and "not run" in bullets[4]
