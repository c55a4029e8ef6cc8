"""Rates, acceptance length and intervals from raw counts, with vLLM's semantics."""

from __future__ import annotations

import pytest

from mtpbench.stats import Counts, diff_interval, homogeneity_pvalue, summarize, wilson


def test_published_figures_round_trip() -> None:
    # 1000 drafts at 98.2/96.3/89.9 % → mean 94.8 %, avg accepted 2.844, AL 3.844 (the seed's 2.84 of 3).
    c = Counts(1000, 3000, 982 + 963 + 899, (982, 963, 899))
    s = summarize(c)
    assert s.per_pos == pytest.approx((0.982, 0.963, 0.899))
    assert s.mean == pytest.approx(0.948, abs=1e-3)
    assert s.avg_accepted == pytest.approx(2.844)
    assert s.acceptance_length == pytest.approx(3.844)
    assert s.conditional == pytest.approx((0.982, 963 / 982, 899 / 963))


def test_counts_add_and_total() -> None:
    a = Counts(10, 30, 12, (6, 4, 2))
    b = Counts(5, 15, 3, (2, 1, 0))
    assert Counts.total([a, b]) == Counts(15, 45, 15, (8, 5, 2))


def test_no_drafts_gives_undefined_rates_not_zero() -> None:
    s = summarize(Counts(0, 0, 0, (0, 0, 0)))
    assert s.per_pos == (None, None, None) and s.mean is None and s.acceptance_length is None


def test_wilson_contains_estimate_and_narrows_with_n() -> None:
    small, big = wilson(9, 10), wilson(900, 1000)
    assert small is not None and big is not None
    assert small.low < 0.9 < small.high
    assert (big.high - big.low) < (small.high - small.low)


def test_diff_interval_without_baseline_counts_is_run_interval_shifted() -> None:
    w = wilson(117, 1000)
    d = diff_interval(117, 1000, None, None, 0.982)
    assert w is not None and d is not None
    assert d.low == pytest.approx(w.low - 0.982) and d.high == pytest.approx(w.high - 0.982)


def test_newcombe_interval_spans_zero_for_equal_rates() -> None:
    d = diff_interval(90, 100, 900, 1000, 0.9)
    assert d is not None and d.low < 0 < d.high


def test_spread_across_repeats() -> None:
    r1, r2 = Counts(100, 300, 0, (12, 3, 1)), Counts(100, 300, 0, (78, 56, 38))
    s = summarize(r1 + r2, repeats=[r1, r2])
    assert s.spread == pytest.approx((0.66, 0.53, 0.37))


def test_homogeneity() -> None:
    assert homogeneity_pvalue([117, 778], [1000, 1000]) < 1e-10
    assert homogeneity_pvalue([500, 505], [1000, 1000]) > 0.5
    assert homogeneity_pvalue([10, 10], [10, 10]) == 1.0
    assert homogeneity_pvalue([5], [10]) is None
