"""Rates, acceptance length, intervals, tests and power from raw counts: vLLM's semantics, checked against
published reference values (Newcombe 1998) and scipy's t procedures, which the clustered estimators must
reduce to when every prompt has the same number of drafts."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from mtpbench.judge.stats import (
    Counts,
    PromptCounts,
    clustered_ratio,
    detectable_drop,
    gate_threshold,
    lower_bound,
    newcombe_diff,
    paired_diff,
    permutation_spread_pvalue,
    summarize,
    welch_df,
    wilson,
)


def prompts(per_pos: list[list[int]], drafts: list[int]) -> PromptCounts:
    pp = np.array(per_pos)
    d = np.array(drafts)
    return PromptCounts(tuple(f"p{i}" for i in range(len(d))), d, d * pp.shape[1], pp.sum(axis=1), pp)


def test_published_figures_round_trip() -> None:
    # 1000 drafts at 98.2/96.3/89.9 % → mean 94.8 %, avg accepted 2.844, AL 3.844 (the seed's 2.84 of 3).
    s = summarize(prompts([[982, 963, 899]], [1000]))
    assert s.per_pos == pytest.approx((0.982, 0.963, 0.899))
    assert s.mean == pytest.approx(0.948, abs=1e-3)
    assert s.avg_accepted == pytest.approx(2.844)
    assert s.acceptance_length == pytest.approx(3.844)
    assert s.conditional == pytest.approx((0.982, 963 / 982, 899 / 963))
    assert s.per_pos_ci == (None, None, None)  # one prompt: no prompt-level interval exists


def test_counts_add_and_total() -> None:
    a = Counts(10, 30, 12, (6, 4, 2))
    b = Counts(5, 15, 3, (2, 1, 0))
    assert Counts.total([a, b]) == Counts(15, 45, 15, (8, 5, 2))


def test_no_drafts_gives_undefined_rates_not_zero() -> None:
    s = summarize(prompts([[0, 0, 0], [0, 0, 0]], [0, 0]))
    assert s.per_pos == (None, None, None) and s.mean is None and s.acceptance_length is None


def test_wilson_matches_newcombe_1998_single_proportion_example() -> None:
    # Newcombe, Stat Med 17:857 (1998), 81/263: score interval 0.2553-0.3662.
    w = wilson(81, 263)
    assert w is not None
    assert (w.low, w.high) == pytest.approx((0.2553, 0.3662), abs=5e-5)


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [((56, 70), (48, 80), (0.0524, 0.3339)), ((9, 10), (3, 10), (0.1705, 0.8090))],
)
def test_newcombe_hybrid_score_interval_matches_the_paper(a, b, want) -> None:
    # Newcombe, Stat Med 17:873 (1998), method 10, worked examples (a) and (b).
    ci = newcombe_diff(*a, *b)
    assert ci is not None
    assert (ci.low, ci.high) == pytest.approx(want, abs=5e-5)


def test_clustered_ratio_equals_one_sample_t_interval_when_drafts_are_equal() -> None:
    rng = np.random.default_rng(1)
    acc = rng.integers(20, 40, size=12)
    den = np.full(12, 40)
    est = clustered_ratio(acc, den, 0.95)
    ref = sps.ttest_1samp(acc / den, 0.0).confidence_interval(0.95)
    assert est.ci is not None and est.df == 11
    assert (est.ci.low, est.ci.high) == pytest.approx((ref.low, ref.high), rel=1e-12)


def test_paired_diff_equals_paired_t_interval_when_drafts_are_equal() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.integers(10, 30, size=9), rng.integers(10, 30, size=9)
    den = np.full(9, 30)
    est = paired_diff(a, den, b, den, 0.9)
    ref = sps.ttest_rel(a / den, b / den).confidence_interval(0.9)
    assert est.ci is not None
    assert (est.ci.low, est.ci.high) == pytest.approx((ref.low, ref.high), rel=1e-12)


def test_clustered_interval_is_wider_than_binomial_for_heterogeneous_prompts() -> None:
    # Five prompts, easy and hard: the draft-level Wilson interval pretends 500 independent trials.
    acc, den = np.array([100, 98, 60, 97, 55]), np.full(5, 100)
    est, w = clustered_ratio(acc, den), wilson(int(acc.sum()), int(den.sum()))
    assert est.ci is not None and w is not None
    assert (est.ci.high - est.ci.low) > 4 * (w.high - w.low)


def test_identical_prompts_give_zero_width_and_unequal_weights_follow_drafts() -> None:
    est = clustered_ratio(np.array([9, 18, 27]), np.array([10, 20, 30]))
    assert est.value == pytest.approx(0.9) and est.se == pytest.approx(0.0)
    assert clustered_ratio(np.array([10, 0]), np.array([10, 30])).value == pytest.approx(0.25)  # ΣA/ΣD


def test_the_rule_s_detectable_drop_and_threshold_are_the_textbook_z_sums() -> None:
    # One-sided α = 0.01, power 0.9, normal: (2.32635 + 1.28155) · se = 3.60790 · se.
    assert detectable_drop(0.01, None, 0.01, 0.9) == pytest.approx(0.0360790, abs=1e-6)
    # Few prompts: t on G−1 degrees of freedom makes it larger; no standard error, no figure.
    assert (
        detectable_drop(0.01, 4, 0.01, 0.9)
        > detectable_drop(0.01, 39, 0.01, 0.9)
        > detectable_drop(0.01, None, 0.01, 0.9)
    )
    assert detectable_drop(None, None, 0.01, 0.9) is None
    # The regression threshold: significance when the run is weak, δ − z_power·se when it is strong enough to
    # catch δ with the target power; a zero-spread comparison calls exactly δ.
    assert gate_threshold(0.02, None, 0.05, 0.01, 0.9) == pytest.approx(2.32635 * 0.02, abs=1e-5)
    assert gate_threshold(0.005, None, 0.05, 0.01, 0.9) == pytest.approx(0.05 - 1.28155 * 0.005, abs=1e-5)
    assert gate_threshold(0.0, None, 0.05, 0.01, 0.9) == pytest.approx(0.05)
    assert lower_bound(-0.01, 0.01, None, 0.01) == pytest.approx(-0.01 - 0.0232635, abs=1e-6)


def test_welch_df_of_two_equal_variances_with_equal_df() -> None:
    assert welch_df(1.0, 10, 1.0, 10) == pytest.approx(20.0)
    assert welch_df(1.0, 10, 0.0, None) == 10


def test_permutation_test_separates_process_effects_from_prompt_noise() -> None:
    d = np.full((8, 2), 50)
    same = np.array([[40, 40], [30, 30], [45, 45], [20, 20], [48, 48], [35, 35], [25, 25], [42, 42]])
    obs, p = permutation_spread_pvalue(same, d)
    assert obs == 0.0 and p == 1.0
    shifted = same.copy()
    shifted[:, 1] -= 10  # the second process accepts 10 fewer on every prompt
    obs, p = permutation_spread_pvalue(shifted, d)
    assert obs == pytest.approx(0.2) and p < 0.01
    # Deterministic: a fixed seed gives the same p-value every time.
    assert permutation_spread_pvalue(shifted, d) == (obs, p)


def test_spread_across_repeats() -> None:
    r1, r2 = Counts(100, 300, 0, (12, 3, 1)), Counts(100, 300, 0, (78, 56, 38))
    s = summarize(prompts([[90, 59, 39]], [200]), repeats=[r1, r2])
    assert s.spread == pytest.approx((0.66, 0.53, 0.37))


def test_align_keeps_the_common_prompts_row_for_row_in_the_first_sides_order() -> None:
    a = PromptCounts(
        ("x", "y", "z", "w"),
        np.array([1, 2, 3, 4]),
        np.array([3, 6, 9, 12]),
        np.array([1, 2, 3, 4]),
        np.array([[1], [2], [3], [4]]),
    )
    b = PromptCounts(
        ("w", "q", "y"),
        np.array([40, 50, 20]),
        np.array([120, 150, 60]),
        np.array([4, 5, 2]),
        np.array([[40], [50], [20]]),
    )
    pa, pb = a.align(b)
    assert pa.ids == pb.ids == ("y", "w")
    assert pa.drafts.tolist() == [2, 4] and pb.drafts.tolist() == [20, 40]
    assert pb.per_pos[:, 0].tolist() == [20, 40]
    assert a.take(["w", "x"]).drafts.tolist() == [4, 1]
    with pytest.raises(KeyError, match="q"):
        a.take(["x", "q"])
    none_a, none_b = a.align(PromptCounts.empty(1))
    assert none_a.g == none_b.g == 0


@pytest.mark.parametrize(
    ("x", "n", "conf"),
    [(0, 1, 0.95), (1, 1, 0.95), (81, 263, 0.95), (0, 40, 0.9), (40, 40, 0.99), (1347, 1347, 0.95), (3, 10_000, 0.95)],
)
def test_wilson_and_t_quantiles_equal_scipy_stats(x: int, n: int, conf: float) -> None:
    """stats.py avoids importing scipy.stats (a second of every compare): its closed forms must agree."""
    from mtpbench.judge.stats import t_quantile

    ci = sps.binomtest(x, n).proportion_ci(confidence_level=conf, method="wilson")
    w = wilson(x, n, conf)
    assert w is not None
    assert w.low == pytest.approx(ci.low, abs=1e-12) and w.high == pytest.approx(ci.high, abs=1e-12)
    for df in (1, 2, 7, 39, 299, None):
        want = sps.norm.ppf(0.975) if df is None else sps.t.ppf(0.975, df)
        assert t_quantile(0.975, df) == pytest.approx(want, rel=1e-12)


def test_summary_gives_both_acceptance_length_definitions_side_by_side() -> None:
    # Issue 20: pooled AL (1 + Σ accepted / Σ drafts, vLLM's acceptance-length test) and the per-request mean
    # (1 + accepted / drafts per prompt, a prompt with no drafts counting as 1, as vLLM's Gemma-4 tests do).
    from mtpbench.judge.stats import PromptCounts, summarize

    ev = PromptCounts(
        ("a", "b", "c"),
        np.array([10, 0, 5]),
        np.array([30, 0, 15]),
        np.array([20, 0, 5]),
        np.array([[9, 7, 4], [0, 0, 0], [3, 2, 0]]),
    )
    s = summarize(ev)
    assert s.acceptance_length == pytest.approx(1 + 25 / 15)
    assert s.request_al == pytest.approx((3 + 1 + 2) / 3)
