import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from anchormask import bootstrap
from anchormask.io import InputError


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
        for key in bootstrap.RESULT_KEYS:
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
    out = bootstrap.run_comparisons(df, COMPARISONS, 2000, 0.95, 2026)
    assert list(out["name"]) == ["heldout", "indomain", "astro", "vs_base"]
    assert list(out["n"]) == [8, 5, 4, 8]
    assert list(out["runs_a"]) == [2, 2, 2, 2] and list(out["runs_b"]) == [2, 2, 2, 1]
    held = df[df["split"] == "held_out"]
    expected_a = held[held["arm"] == "anchor"].groupby("query_id")["overlap"].mean().mean()
    row = out.set_index("name").loc["heldout"]
    assert row["mean_a"] == pytest.approx(expected_a)
    # per query: anchor - random = shift + 2 * mean(noise) = 0.1 + 0.01 exactly, every query
    assert row["diff_lo"] == pytest.approx(0.11) and row["diff_hi"] == pytest.approx(0.11)
    assert row["p_a_gt_b"] == 1.0
    assert row["report"] == "1.67x" and out.set_index("name").loc["indomain", "report"] is None
    assert set(out["selector"]) == {"split=held_out", "split=in_domain", "domain=astro"}


def test_run_comparisons_is_seeded_and_independent_of_other_comparisons():
    df = table(shift=0.0)
    df.loc[df["arm"] == "anchor", "overlap"] += np.random.default_rng(3).normal(0, 0.05, (df["arm"] == "anchor").sum())
    one = bootstrap.run_comparisons(df, COMPARISONS, 1000, 0.95, 5)
    two = bootstrap.run_comparisons(df, COMPARISONS, 1000, 0.95, 5)
    pd.testing.assert_frame_equal(one, two)
    other_seed = bootstrap.run_comparisons(df, COMPARISONS, 1000, 0.95, 6)
    assert not np.allclose(one["diff_lo"], other_seed["diff_lo"])
    alone = bootstrap.run_comparisons(df, [COMPARISONS[2]], 1000, 0.95, 5)
    pd.testing.assert_series_equal(alone.iloc[0], one.iloc[2], check_names=False)


def test_query_sets_must_match():
    df = table()
    df = df[~((df["arm"] == "random") & (df["query_id"] == "astro-q05"))]
    with pytest.raises(InputError, match="comparison 'heldout'.*different queries.*astro-q05"):
        bootstrap.run_comparisons(df, COMPARISONS[:1], 100, 0.95, 0)


def test_unknown_arm_and_bad_selector_are_named():
    df = table()
    with pytest.raises(InputError, match="comparison 'x': arm 'reverse' has no generations"):
        bootstrap.run_comparisons(df, [{"name": "x", "a": "reverse", "b": "random", "split": "held_out"}], 10, 0.95, 0)
    with pytest.raises(InputError, match="exactly one of split or domain"):
        bootstrap.run_comparisons(df, [{"name": "y", "a": "anchor", "b": "random"}], 10, 0.95, 0)


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
    out = bootstrap.run_sweep(sweep_table(), 500, 0.95, 1, report={"72x100": "1.97-2.19x", "999x1": "x"})
    assert list(out["point"]) == ["72x100", "72x1000", "144x100", "144x1000"]
    assert list(out["ratio"]) == pytest.approx([2.0, 1.5, 2.1, 1.1])
    assert list(out["ratio_lo"]) == pytest.approx([2.0, 1.5, 2.1, 1.1])
    assert (out["n"] == 6).all()
    assert list(out["a"])[0] == "sweep:anchor_n72_s100" and list(out["b"])[0] == "sweep:random_n72_s100"
    assert out["report"].tolist() == ["1.97-2.19x", None, None, None]


def test_run_sweep_needs_both_strategies():
    df = sweep_table()
    df = df[~((df["strategy"] == "random") & (df["train_steps"] == 1000) & (df["train_size"] == 72))]
    with pytest.raises(InputError, match="72x1000: expected one 'random' arm"):
        bootstrap.run_sweep(df, 100, 0.95, 1)
