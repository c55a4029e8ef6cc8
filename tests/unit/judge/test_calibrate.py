"""judge/calibrate.py: each upstream rule as its test computes it, on small hand-checked counts, and the
calibration's answers (greedy determinism, the collapse's size, a fixed seed's reproducibility)."""

from __future__ import annotations

import numpy as np
import pytest

from mtpbench.judge.calibrate import (
    COLLAPSE_FROM_PCT,
    COLLAPSE_TO_PCT,
    RULES,
    Measure,
    calibrate,
    collapse_pct,
    expected,
    measure,
    needed,
    passes,
)
from mtpbench.judge.noise import Truth, al_scale

# Two prompts: one with 10 drafts accepting 9/8/7 at positions 0/1/2, one that never drafted.
DRAFTS = np.array([[10, 0]])
ACCEPTED = np.array([[[9, 8, 7], [0, 0, 0]]])


def golden(al: float, per_pos: list[float]) -> Measure:
    return Measure(np.array([al]), np.array([per_pos]))


def test_pooled_al_is_one_plus_accepted_per_draft_and_the_rates_are_per_draft() -> None:
    m = measure(DRAFTS, ACCEPTED, "pooled")
    assert m.al[0] == pytest.approx(3.4)
    assert m.per_pos[0] == pytest.approx([0.9, 0.8, 0.7])


def test_the_per_request_mean_counts_a_prompt_without_drafts_as_one() -> None:
    # (3.4 + 1) / 2: compute_acceptance_len returns 1 for a request with no drafts
    assert measure(DRAFTS, ACCEPTED, "per-request-mean").al[0] == pytest.approx(2.2)


def test_vllm_acceptance_rates_floors_the_mean_at_95_percent_of_expected() -> None:
    rule = RULES["vllm-acceptance-rates"]
    run = measure(DRAFTS, ACCEPTED, rule.statistic)  # 2.2
    assert passes(rule, run, golden(2.3, [0, 0, 0]), 0.05)[0]  # floor 2.185
    assert not passes(rule, run, golden(2.4, [0, 0, 0]), 0.05)[0]  # floor 2.28
    assert needed(rule, run, golden(2.3, [0, 0, 0]))[0] == pytest.approx(1 - 2.2 / 2.3)


def test_vllm_acceptance_length_is_two_sided_on_al_and_one_sided_per_position() -> None:
    rule = RULES["vllm-acceptance-length"]
    run = measure(DRAFTS, ACCEPTED, rule.statistic)  # 3.4, [0.9, 0.8, 0.7]
    assert not passes(rule, run, golden(3.2, [0.9, 0.8, 0.7]), 0.05)[0]  # a 6.25 % gain fails too
    assert passes(rule, run, golden(3.3, [0.94, 0.8, 0.7]), 0.05)[0]  # 0.9 >= 0.94 x 0.95 = 0.893
    assert not passes(rule, run, golden(3.3, [0.95, 0.8, 0.7]), 0.05)[0]  # 0.9 < 0.9025
    assert passes(rule, run, golden(3.4, [0.9, 0.8, 0.0]), 0.05)[0]  # a zero golden is not checked
    assert needed(rule, run, golden(3.3, [0.95, 0.8, 0.7]))[0] == pytest.approx(1 - 0.9 / 0.95)


def test_vllm_ascend_passes_a_position_at_or_above_golden_or_within_the_margin() -> None:
    rule = RULES["vllm-ascend-golden"]
    run = measure(DRAFTS, ACCEPTED, rule.statistic)
    assert passes(rule, run, golden(1.0, [0.95, 0.8, 0.7]), 0.06)[0]  # 0.05 < 0.06
    assert not passes(rule, run, golden(1.0, [0.97, 0.8, 0.7]), 0.06)[0]  # 0.07 >= 0.06
    assert needed(rule, run, golden(1.0, [0.97, 0.5, 0.7]))[0] == pytest.approx(0.07)


def test_trtllm_floors_the_pooled_al_at_min_al() -> None:
    rule = RULES["trtllm-min-al"]
    run = measure(DRAFTS, ACCEPTED, rule.statistic)  # 3.4
    assert passes(rule, run, golden(3.5, [0, 0, 0]), 0.05)[0]  # min_al 3.325
    assert not passes(rule, run, golden(3.6, [0, 0, 0]), 0.05)[0]  # min_al 3.42


def test_sglang_fails_an_al_equal_to_its_threshold() -> None:
    rule = RULES["sglang-threshold"]
    run = measure(DRAFTS, ACCEPTED, rule.statistic)  # 3.4
    assert not passes(rule, run, golden(6.8, [0, 0, 0]), 0.5)[0]  # threshold 3.4: assertGreater
    assert passes(RULES["trtllm-min-al"], run, golden(6.8, [0, 0, 0]), 0.5)[0]  # >= passes it


@pytest.mark.parametrize("name", sorted(RULES))
def test_a_run_passes_just_above_its_need_and_fails_just_below(name: str) -> None:
    rule = RULES[name]
    rng = np.random.default_rng(1)
    drafts = rng.integers(20, 60, size=(50, 8))
    acc = np.minimum.accumulate(rng.binomial(drafts[..., None], [0.9, 0.8, 0.7]), axis=2)
    run = measure(drafts, acc, rule.statistic)
    gold = measure(drafts[:1], acc[:1], rule.statistic)
    gold = Measure(np.repeat(gold.al, 50), np.repeat(gold.per_pos, 50, axis=0))
    need = needed(rule, run, gold)
    assert passes(rule, run, gold, need + 1e-9).all()  # type: ignore[arg-type]
    short = need > 1e-6
    assert short.any()
    below = passes(rule, run, gold, need - 1e-6)  # type: ignore[arg-type]
    assert not below[short].any()


def uniform_truth(n: int = 15) -> Truth:
    rates = np.tile([0.982, 0.963, 0.899], (n, 1))
    return Truth("seed-like", tuple(f"p{i}" for i in range(n)), rates, np.full(n, 256.0))


def test_the_collapse_takes_the_mean_acceptance_to_the_seeds_share_of_itself() -> None:
    t = uniform_truth()
    after = expected(t, al_scale(t, collapse_pct(t)), "pooled")
    mean_rate = float(after.per_pos[0].mean())
    assert mean_rate == pytest.approx(0.948 * COLLAPSE_TO_PCT / COLLAPSE_FROM_PCT, rel=0.02)


def test_greedy_repeatability_never_false_alarms_and_the_seed_reproduces_the_answer() -> None:
    t = uniform_truth()
    a = calibrate(RULES["vllm-ascend-golden"], t, "seed-like", None, reps=40, seed=7)
    b = calibrate(RULES["vllm-ascend-golden"], t, "seed-like", None, reps=40, seed=7)
    assert a.bursty == b.bursty and a.calibrated == b.calibrated and a.greedy == b.greedy
    assert a.greedy.false_alarm == 0.0 and a.greedy.reps == 1
    assert a.greedy.power_collapse == 1.0
    # the calibrated threshold holds the healthy draws' false alarms to the goal
    assert a.calibrated.false_alarm <= 0.01 + 1 / 40
    assert 0 < a.bursty.false_alarm <= 1 and a.calibrated.tolerance > 0
