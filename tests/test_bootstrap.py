import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from anchormask.fileio import InputError
from anchormask.stats import bootstrap, pairwise, signflip

pytestmark = pytest.mark.unit


def rng(seed=0):
    return np.random.default_rng(seed)


def test_constant_shift_collapses_diff_interval():
    a = rng(1).uniform(0.2, 0.8, size=30)
    b = a - 0.05
    out = bootstrap.paired_bootstrap(a, b, 2000, 0.95, rng(2))
    assert out["diff"] == pytest.approx(0.05, abs=1e-12)
    assert out["diff_lo"] == pytest.approx(0.05, abs=1e-12)
    assert out["diff_hi"] == pytest.approx(0.05, abs=1e-12)
    assert out["p_a_gt_b"] == 1.0
    assert out["n"] == 30
    assert out["ratio"] == pytest.approx(a.mean() / b.mean())
    assert out["ratio_lo"] < out["ratio"] < out["ratio_hi"]


def test_constant_ratio_collapses_ratio_interval():
    b = rng(3).uniform(0.1, 0.4, size=25)
    out = bootstrap.paired_bootstrap(2 * b, b, 1000, 0.9, rng(4))
    assert out["ratio_lo"] == pytest.approx(2.0, abs=1e-12)
    assert out["ratio_hi"] == pytest.approx(2.0, abs=1e-12)


def _scipy_ci(a, b, statistic, resamples, seed):
    res = stats.bootstrap((a, b), statistic, paired=True, vectorized=True, method="percentile",
                          n_resamples=resamples, confidence_level=0.95, rng=np.random.default_rng(seed))
    return res.confidence_interval.low, res.confidence_interval.high


def test_agrees_with_scipy_percentile_paired_bootstrap():
    gen = rng(10)
    n, resamples = 40, 20_000
    a = gen.uniform(0.1, 0.9, size=n)
    b = np.clip(a - 0.08 + gen.normal(0, 0.1, size=n), 0, 1)
    ours = bootstrap.paired_bootstrap(a, b, resamples, 0.95, rng(11))

    se_diff = np.std(a - b, ddof=1) / np.sqrt(n)
    lo, hi = _scipy_ci(a, b, lambda x, y, axis: x.mean(axis) - y.mean(axis), resamples, 12)
    assert ours["diff_lo"] == pytest.approx(lo, abs=0.15 * se_diff)
    assert ours["diff_hi"] == pytest.approx(hi, abs=0.15 * se_diff)

    lo, hi = _scipy_ci(a, b, lambda x, y, axis: x.mean(axis) / y.mean(axis), resamples, 13)
    width = hi - lo
    assert ours["ratio_lo"] == pytest.approx(lo, abs=0.05 * width)
    assert ours["ratio_hi"] == pytest.approx(hi, abs=0.05 * width)


def test_interval_narrows_with_more_queries():
    gen = rng(20)
    widths = []
    for n in (20, 80, 320):
        a = gen.uniform(0.2, 0.8, size=n)
        b = np.clip(a - 0.05 + gen.normal(0, 0.15, size=n), 0, 1)
        out = bootstrap.paired_bootstrap(a, b, 4000, 0.95, rng(21))
        widths.append(out["diff_hi"] - out["diff_lo"])
    assert widths[0] > 1.5 * widths[1] > 1.5 * 1.5 * widths[2]


def test_probability_one_when_a_beats_b_on_every_query_and_ties_count_as_not_greater():
    gen = rng(30)
    b = gen.uniform(0, 0.5, size=12)
    a = b + gen.uniform(1e-6, 0.1, size=12)
    assert bootstrap.paired_bootstrap(a, b, 3000, 0.95, rng(31))["p_a_gt_b"] == 1.0
    assert bootstrap.paired_bootstrap(b, a, 3000, 0.95, rng(31))["p_a_gt_b"] == 0.0
    tie = bootstrap.paired_bootstrap(b, b.copy(), 3000, 0.95, rng(31))
    assert tie["p_a_gt_b"] == 0.0 and tie["diff_lo"] == tie["diff_hi"] == 0.0


def test_zero_division_gives_inf_or_nan_without_warnings():
    a = np.array([0.2, 0.4, 0.0, 0.1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        all_zero_b = bootstrap.paired_bootstrap(a, np.zeros(4), 500, 0.95, rng(40))
        both_zero = bootstrap.paired_bootstrap(np.zeros(4), np.zeros(4), 500, 0.95, rng(40))
        some_zero = bootstrap.paired_bootstrap(a, np.array([0.0, 0.0, 0.0, 0.3]), 2000, 0.95, rng(40))
    assert all_zero_b["ratio"] == np.inf and all_zero_b["ratio_lo"] == np.inf
    assert all_zero_b["zero_b_resamples"] == 500
    assert np.isnan(both_zero["ratio"]) and np.isnan(both_zero["ratio_lo"]) and np.isnan(both_zero["ratio_hi"])
    assert both_zero["p_a_gt_b"] == 0.0
    # P(resample misses query 4) = (3/4)^4 ~ 0.32: some resampled ratios are +inf.
    assert 0 < some_zero["zero_b_resamples"] < 2000
    assert some_zero["ratio_hi"] == np.inf and np.isfinite(some_zero["ratio_lo"])


def test_batch_shares_indices_and_equals_single_calls():
    gen = rng(50)
    a = gen.uniform(size=(3, 15))
    b = gen.uniform(size=(3, 15))
    batch = bootstrap.paired_bootstrap_batch(a, b, 1000, 0.95, rng(51))
    for i in range(3):
        single = bootstrap.paired_bootstrap(a[i], b[i], 1000, 0.95, rng(51))
        for key in single:
            assert batch[key][i] == pytest.approx(single[key], rel=1e-12, abs=1e-15), key


def test_resample_counts_rows_sum_to_n():
    counts = bootstrap.resample_counts(7, 100, rng(0))
    assert counts.shape == (100, 7)
    assert (counts.sum(axis=1) == 7).all()


def test_bad_shapes_and_confidence_raise():
    with pytest.raises(ValueError):
        bootstrap.paired_bootstrap(np.zeros(3), np.zeros(4), 10, 0.95, rng())
    with pytest.raises(ValueError):
        bootstrap.paired_bootstrap(np.zeros(3), np.zeros(3), 10, 1.5, rng())


# --------------------------------------------------------------------------- comparisons over a table

def table(seeds=(42, 43), shift=0.1):
    """anchor = random + shift (+ seed noise) on every query; base lower; 5 in-domain, 2x4 held-out."""
    gen = np.random.default_rng(7)
    places = [("geo", "in_domain")] * 5 + [("astro", "held_out")] * 4 + [("law", "held_out")] * 4
    rows = []
    for qi, (domain, split) in enumerate(places):
        qid = f"{domain}-q{qi:02d}"
        base_value = gen.uniform(0.1, 0.5)
        rows.append(dict(query_id=qid, domain=domain, split=split, arm="base", strategy=None,
                         train_seed=None, overlap=base_value / 2))
        for si, seed in enumerate(seeds):
            noise = 0.01 * si
            rows.append(dict(query_id=qid, domain=domain, split=split, arm="random", strategy="random",
                             train_seed=seed, overlap=base_value + noise))
            rows.append(dict(query_id=qid, domain=domain, split=split, arm="anchor", strategy="anchor",
                             train_seed=seed, overlap=base_value + shift + 3 * noise))
    return pd.DataFrame(rows)


COMPARISONS = [
    {"name": "heldout", "a": "anchor", "b": "random", "split": "held_out", "report": "1.67x"},
    {"name": "indomain", "a": "anchor", "b": "random", "split": "in_domain"},
    {"name": "astro", "a": "anchor", "b": "random", "domain": "astro"},
    {"name": "vs_base", "a": "anchor", "b": "base", "split": "held_out"},
]


def test_run_comparisons_pairs_queries_and_averages_seeds():
    df = table()
    out = pairwise.run_comparisons(df, COMPARISONS, 2000, 0.95, 2026)
    assert list(out["name"]) == ["heldout", "indomain", "astro", "vs_base"]
    assert list(out["n"]) == [8, 5, 4, 8]
    assert list(out["runs_a"]) == [2, 2, 2, 2] and list(out["runs_b"]) == [2, 2, 2, 1]
    held = df[df["split"] == "held_out"]
    expected_a = held[held["arm"] == "anchor"].groupby("query_id")["overlap"].mean().mean()
    row = out.set_index("name").loc["heldout"]
    assert row["mean_a"] == pytest.approx(expected_a)
    # anchor - random = shift + 2 * noise on every query: 0.10 with seed 42, 0.12 with seed 43. Seeds are
    # resampled too, so the interval spans the seed difference (a resample draws seed 42 twice w.p. 1/4).
    assert row["diff"] == pytest.approx(0.11) and row["seeds"] == 2
    assert row["diff_lo"] == pytest.approx(0.10) and row["diff_hi"] == pytest.approx(0.12)
    assert row["p_a_gt_b"] == 1.0
    assert row["report"] == "1.67x" and out.set_index("name").loc["indomain", "report"] is None
    assert set(out["selector"]) == {"split=held_out", "split=in_domain", "domain=astro"}


def test_run_comparisons_is_seeded_and_independent_of_other_comparisons():
    df = table(shift=0.0)
    df.loc[df["arm"] == "anchor", "overlap"] += np.random.default_rng(3).normal(0, 0.05, (df["arm"] == "anchor").sum())
    one = pairwise.run_comparisons(df, COMPARISONS, 1000, 0.95, 5)
    two = pairwise.run_comparisons(df, COMPARISONS, 1000, 0.95, 5)
    pd.testing.assert_frame_equal(one, two)
    other_seed = pairwise.run_comparisons(df, COMPARISONS, 1000, 0.95, 6)
    assert not np.allclose(one["diff_lo"], other_seed["diff_lo"])
    alone = pairwise.run_comparisons(df, [COMPARISONS[2]], 1000, 0.95, 5)
    own = [c for c in one.columns if c not in ("p_holm", "family")]  # Holm depends on the family, by design
    pd.testing.assert_series_equal(alone.iloc[0][own], one.iloc[2][own], check_names=False)
    assert alone.loc[0, "family"] == 1 and one.loc[2, "family"] == 4


def test_query_sets_must_match():
    df = table()
    df = df[~((df["arm"] == "random") & (df["query_id"] == "astro-q05"))]
    with pytest.raises(InputError, match="comparison 'heldout'.*different queries.*astro-q05"):
        pairwise.run_comparisons(df, COMPARISONS[:1], 100, 0.95, 0)


def test_unknown_arm_and_bad_selector_are_named():
    df = table()
    with pytest.raises(InputError, match="comparison 'x': arm 'reverse' has no generations"):
        pairwise.run_comparisons(df, [{"name": "x", "a": "reverse", "b": "random", "split": "held_out"}], 10, 0.95, 0)
    with pytest.raises(InputError, match="exactly one of split or domain"):
        pairwise.run_comparisons(df, [{"name": "y", "a": "anchor", "b": "random"}], 10, 0.95, 0)


def sweep_table():
    rows = []
    gen = np.random.default_rng(9)
    values = gen.uniform(0.1, 0.4, size=6)
    for size, steps, factor in [(72, 100, 2.0), (72, 1000, 1.5), (144, 100, 2.1), (144, 1000, 1.1)]:
        for strategy, mult in (("anchor", factor), ("random", 1.0)):
            for q, v in enumerate(values):
                for split in ("held_out", "in_domain"):
                    rows.append(dict(query_id=f"{split}-q{q}", domain="astro" if split == "held_out" else "geo",
                                     split=split, arm=f"sweep:{strategy}_n{size}_s{steps}", strategy=strategy,
                                     train_size=size, train_steps=steps, train_seed=42,
                                     overlap=v * mult if split == "held_out" else 0.5))
    return pd.DataFrame(rows)


def test_run_sweep_compares_anchor_with_random_per_point():
    out = pairwise.run_sweep(sweep_table(), 500, 0.95, 1, report={"72x100": "1.97-2.19x", "999x1": "x"},
                             strategies=["anchor", "random"])
    assert list(out["point"]) == ["72x100", "72x1000", "144x100", "144x1000"]
    assert list(out["ratio"]) == pytest.approx([2.0, 1.5, 2.1, 1.1])
    assert list(out["ratio_lo"]) == pytest.approx([2.0, 1.5, 2.1, 1.1])
    assert (out["n"] == 6).all()
    assert list(out["a"])[0] == "sweep:anchor_n72_s100" and list(out["b"])[0] == "sweep:random_n72_s100"
    assert out["report"].tolist() == ["1.97-2.19x", None, None, None]


def test_run_sweep_compares_the_first_strategy_with_each_other():
    df = sweep_table()
    reverse = df[df["strategy"] == "random"].assign(strategy="reverse", overlap=lambda d: d["overlap"] * 0.5,
                                                     arm=lambda d: d["arm"].str.replace("random", "reverse"))
    two = pairwise.run_sweep(df, 300, 0.95, 1, report={"72x100": "2x"}, strategies=["anchor", "random"])
    three = pairwise.run_sweep(pd.concat([df, reverse]), 300, 0.95, 1, report={"72x100": "2x"},
                               strategies=["anchor", "random", "reverse"])
    assert list(three["point"]) == [p for p in two["point"] for _ in (0, 1)]
    assert [b.split(":")[1].split("_")[0] for b in three["b"]] == ["random", "reverse"] * len(two)
    vs_random = three.iloc[::2].reset_index(drop=True)
    same = [c for c in two.columns if c not in ("p_holm", "family")]  # Holm's family is every row
    pd.testing.assert_frame_equal(vs_random[same], two[same])
    assert list(three.iloc[1::2]["ratio"]) == pytest.approx([4.0, 3.0, 4.2, 2.2])
    assert three["report"].tolist()[:2] == ["2x", None] and (three["family"] == 8).all()
    with pytest.raises(InputError, match="give at least two"):
        pairwise.run_sweep(df, 100, 0.95, 1, strategies=["anchor"])


def test_run_sweep_needs_both_strategies():
    df = sweep_table()
    df = df[~((df["strategy"] == "random") & (df["train_steps"] == 1000) & (df["train_size"] == 72))]
    with pytest.raises(InputError, match="72x1000: expected one 'random' arm"):
        pairwise.run_sweep(df, 100, 0.95, 1, strategies=["anchor", "random"])


# --------------------------------------------------------------------------- two levels: seeds and queries

# run_comparisons on a one-seed table, computed by the code before seeds were resampled (commit 07166d4),
# as float.hex: with one training seed the two-level bootstrap must give these numbers bit for bit.
ONE_SEED_BEFORE = {
    'heldout': {"mean_a": "0x1.3ad6180dcc5b4p-2", "mean_b": "0x1.2907d64ef7115p-2", "ratio": "0x1.0f5898f9d74b1p+0", "ratio_lo": "0x1.c399376c43d4dp-1", "ratio_hi": "0x1.3ee0fff9a672fp+0", "diff": "0x1.1ce41bed549f4p-6", "diff_lo": "-0x1.b54d3ca29dc8dp-6", "diff_hi": "0x1.271e54d218230p-4", "p_a_gt_b": "0x1.6872b020c49bap-1"},  # noqa: E501
    'indomain': {"mean_a": "0x1.56bb4941cbd68p-2", "mean_b": "0x1.4db0ba40fdabap-2", "ratio": "0x1.06efade0c2212p+0", "ratio_lo": "0x1.aede2f9676e65p-1", "ratio_hi": "0x1.301d401ed8461p+0", "diff": "0x1.2151e019c55c6p-7", "diff_lo": "-0x1.d3121388fb172p-5", "diff_hi": "0x1.140b3008a15e0p-4", "p_a_gt_b": "0x1.3851eb851eb85p-1"},  # noqa: E501
    'astro': {"mean_a": "0x1.4fed01fd0d75ep-2", "mean_b": "0x1.661ad035ee7b3p-2", "ratio": "0x1.e04a295793108p-1", "ratio_lo": "0x1.5c8a19597a3d5p-1", "ratio_hi": "0x1.0523979d74197p+0", "diff": "-0x1.62dce38e10549p-6", "diff_lo": "-0x1.e07319ecfabb0p-5", "diff_hi": "0x1.20be69b121ce0p-7", "p_a_gt_b": "0x1.8d4fdf3b645a2p-3"},  # noqa: E501
    'vs_base': {"mean_a": "0x1.3ad6180dcc5b4p-2", "mean_b": "0x1.2907d64ef7115p-3", "ratio": "0x1.0f5898f9d74b1p+1", "ratio_lo": "0x1.c399376c43d4dp+0", "ratio_hi": "0x1.3ee0fff9a672fp+1", "diff": "0x1.4ca459cca1a54p-3", "diff_lo": "0x1.76f61905b5d3dp-4", "diff_hi": "0x1.d4e8a830103afp-3", "p_a_gt_b": "0x1.0000000000000p+0"},  # noqa: E501
}


def test_one_seed_gives_the_one_level_numbers_bit_for_bit():
    df = table(seeds=(42,), shift=0.02)
    anchor = df["arm"] == "anchor"
    df.loc[anchor, "overlap"] += np.random.default_rng(3).normal(0, 0.05, anchor.sum())
    out = pairwise.run_comparisons(df, COMPARISONS, 500, 0.95, 2026)
    assert (out["seeds"] == 1).all()
    got = {r["name"]: {k: float(r[k]).hex() for k in ONE_SEED_BEFORE["heldout"]} for r in out.to_dict("records")}
    assert got == ONE_SEED_BEFORE


def test_two_level_resampling_matches_its_hand_computed_distribution():
    # x[s, q] = 2s + q on 2 seeds x 2 queries. A resample's mean is 2 * (mean of 2 drawn seeds) + (mean of 2
    # drawn queries); each mean is 0, 1/2, 1 with probability 1/4, 1/2, 1/4. So the resampled mean is 0 and
    # 3 with probability 1/16 each (both percentile ends of a 95% interval: 1/16 > 2.5%), 1.5 with 1/4 (1 + 1/2),
    # its variance 4/8 + 1/8 = 5/8, and P(mean > 0) = 15/16.
    grid = np.array([[[0.0, 1.0], [2.0, 3.0]]])
    counts = bootstrap._resampled_means(grid, 100_000, rng(7))[0]
    assert np.mean(counts == 0.0) == pytest.approx(1 / 16, abs=0.004)
    assert np.mean(counts == 3.0) == pytest.approx(1 / 16, abs=0.004)
    assert np.mean(counts == 1.5) == pytest.approx(1 / 4, abs=0.006)
    assert counts.var() == pytest.approx(5 / 8, rel=0.02)
    out = bootstrap.paired_bootstrap(grid[0], np.zeros((2, 2)), 20_000, 0.95, rng(8))
    assert out["seeds"] == 2 and out["diff"] == 1.5
    assert out["diff_lo"] == 0.0 and out["diff_hi"] == 3.0
    assert out["p_a_gt_b"] == pytest.approx(15 / 16, abs=0.006)


def test_arms_pair_by_seed_index_and_a_seedless_arm_repeats():
    # anchor - random is +0.1 on seed 42 and -0.1 on seed 43 for every query: only the seeds vary.
    rows = []
    for q in range(6):
        for seed, sign in ((42, 1), (43, -1)):
            rows += [dict(query_id=f"q{q}", domain="astro", split="held_out", arm="random", train_seed=seed,
                          overlap=0.3),
                     dict(query_id=f"q{q}", domain="astro", split="held_out", arm="anchor", train_seed=seed,
                          overlap=0.3 + 0.1 * sign)]
        rows.append(dict(query_id=f"q{q}", domain="astro", split="held_out", arm="base", train_seed=None, overlap=0.3))
    comps = [{"name": "ar", "a": "anchor", "b": "random", "split": "held_out"},
             {"name": "ab", "a": "anchor", "b": "base", "split": "held_out"}]
    out = pairwise.run_comparisons(pd.DataFrame(rows), comps, 4000, 0.95, 1).set_index("name")
    for name in ("ar", "ab"):  # the base's one row stands for every drawn seed: same numbers as random
        assert out.loc[name, "seeds"] == 2 and out.loc[name, "diff"] == pytest.approx(0.0, abs=1e-15)
        assert out.loc[name, "diff_lo"] == pytest.approx(-0.1) and out.loc[name, "diff_hi"] == pytest.approx(0.1)
    # Averaging the seeds first (the one-level scheme) would have given a zero-width interval.


def test_unequal_seed_counts_and_incomplete_grids_are_errors():
    df = table(seeds=(42, 43))
    three = table(seeds=(42, 43, 44))
    mixed = pd.concat([df[df["arm"] != "anchor"], three[three["arm"] == "anchor"]])
    with pytest.raises(InputError, match="training seeds where the other arms of its query set have"):
        pairwise.run_comparisons(mixed, COMPARISONS[:1], 100, 0.95, 0)
    holed = df.drop(df[(df["arm"] == "anchor") & (df["train_seed"] == 43) & (df["query_id"] == "astro-q05")].index)
    with pytest.raises(InputError, match="arm 'anchor': its training seeds answered different queries"):
        pairwise.run_comparisons(holed, COMPARISONS[:1], 100, 0.95, 0)


# --------------------------------------------------------------------------- permutation test and Holm

def test_sign_flip_p_value_equals_exact_enumeration():
    d = np.array([0.3, -0.1, 0.25, 0.05, 0.2, -0.05])
    observed = abs(d.sum())
    extreme = sum(abs(np.dot(signs, d)) >= observed - 1e-12
                  for signs in itertools.product((1, -1), repeat=len(d)))
    p, exact = signflip.sign_flip_pvalues(d, 100, rng())
    assert exact and p[0] == extreme / 2 ** len(d)
    # By hand: flipping a set F gives sum 0.65 - 2 sum(F), as extreme iff sum(F) <= 0 or sum(F) >= 0.65. sum(F) <= 0:
    # F = {} and, for each of the 3 non-empty subsets of {-0.1, -0.05}, F with none of the positives or with +0.05
    # (7 sets); their 7 complements give sum(F) >= 0.65. So p = 14/64.
    assert p[0] == 14 / 64


def test_sign_flip_monte_carlo_approaches_the_exact_value_and_is_seeded():
    gen = rng(5)
    d = gen.normal(0.05, 0.2, size=signflip.EXACT_MAX_QUERIES + 4)
    first, exact = signflip.sign_flip_pvalues(d, 20_000, rng(6))
    again, _ = signflip.sign_flip_pvalues(d, 20_000, rng(6))
    assert not exact and first[0] == again[0]
    n = len(d)
    signs = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)
    truth = np.mean(np.abs(signs @ d) >= abs(d.sum()) * (1 - 1e-9))
    assert first[0] == pytest.approx(truth, abs=4 * np.sqrt(truth * (1 - truth) / 20_000) + 1e-4)
    zero, _ = signflip.sign_flip_pvalues(np.zeros((1, 3)), 10, rng())
    assert zero[0] == 1.0


def test_holm_against_a_hand_computed_case():
    # sorted: 0.005 * 4 = 0.02; 0.01 * 3 = 0.03; 0.03 * 2 = 0.06; 0.04 * 1 = 0.04 -> raised to 0.06
    assert signflip.holm([0.01, 0.04, 0.03, 0.005]).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert signflip.holm([0.5, 0.6]).tolist() == [1.0, 1.0]


def test_comparisons_carry_p_values_and_holm_over_their_table():
    out = pairwise.run_comparisons(table(), COMPARISONS, 500, 0.95, 2026)
    assert (out["family"] == len(COMPARISONS)).all()
    assert out["p_holm"].tolist() == pytest.approx(signflip.holm(out["p_perm"]).tolist())
    # heldout: 8 queries, anchor above random on each: 2 of 2^8 patterns are as extreme
    assert out.set_index("name").loc["heldout", "p_perm"] == 2 / 256
    assert out["perm_exact"].all()
