"""What the acceptance gates other projects run cost (issue 39): each upstream rule as its test computes it,
applied at its own sample size to a stored run's per-prompt spread, and its false-alarm rate on a healthy
build, its power at a 5 % AL drop and at the seed's collapse, and the smallest AL drop it catches 90 % of the
time; under greedy repeatability (a healthy build repeats its counts bit for bit) and under the bursty
prompt-level noise of judge/noise.py (the model benchmarks/gate_power.py measures mtpbench's own gate under).

The rules (RULES), each read from the upstream file named in its `source` (the lines quoted there):
- `vllm-acceptance-rates`: the mean over prompts of each prompt's AL (1 + accepted / drafts, 1 without
  drafts), prompts sent one at a time, `mean >= expected * 0.95`, one-sided; min(200, dataset) prompts,
  max_tokens 2048 (vllm tests/v1/e2e/spec_decode/acceptance_rates/utils.py @025aa2e8
  run_acceptance_length_eval: the 200-prompt cap l.57, max_tokens=2048 l.80, each prompt's AL from counter
  deltas l.84 (../utils.py compute_acceptance_len), the mean l.88, x 0.95 l.92, the assert l.98).
  The dataset here is HumanEval: 164 prompts.
- `vllm-acceptance-length`: vLLM's counters pooled over 80 MT-Bench prompts x 256 tokens, AL two-sided
  `abs(AL - expected) / expected <= DEFAULT_RTOL` (0.05) and each position one-sided
  `rate_i >= expected_i * (1 - rtol)` where `expected_i > 0` (vllm tests/v1/spec_decode/test_acceptance_length.py
  @029ba375: the module constants DEFAULT_NUM_PROMPTS = 80, DEFAULT_OUTPUT_LEN = 256, DEFAULT_RTOL = 0.05;
  extract_acceptance_metrics pools the counters; test_eagle3_acceptance_length's two asserts, the AL one on
  DEFAULT_RTOL and the per-position one on the entry's rtol). Per-position rates are per draft step
  (accepted_i / drafts).
- `vllm-ascend-golden`: pooled per-position rates over 15 coding prompts x 256 tokens, each
  `a >= b or b - a < 0.06` (vllm-ascend tests/e2e/pull_request/one_card/spec_decode/test_gemma4_mtp.py as
  vllm-ascend#16394 describes it; baselines/vllm-ascend-gemma4-31b-mtp-coding.yaml says why no commit).
- `trtllm-min-al`: `(accepted + requests) / requests` summed over the iterations with drafts, i.e. the
  pooled AL per draft step, `al >= min_al`, one-sided, min_al = 0.95 x ref_al when populated; the GSM8K task's
  1,319 questions x 256 tokens (TensorRT-LLM tests/integration/defs/accuracy/accuracy_core.py
  compute_acceptance_length and assert_acceptance_length; GSM8K NUM_SAMPLES / MAX_OUTPUT_LEN in the same
  file; references/acceptance_length.yaml holds ref_al/min_al per test).
- `sglang-threshold`: the server's pooled `avg_spec_accept_length` strictly above `accept_length_thres`,
  one-sided, over GSM8K's first 200 questions x 512 new tokens (sglang python/sglang/test/kits/
  gsm8k_accuracy_kit.py GSM8KMixin.test_gsm8k: `assertGreater(avg_spec_accept_length, thres)`). Its
  thresholds are hand-set absolute values (4.6 against a measured 5.07, 2.4 against 2.62: 6-16 % below);
  here the threshold is `ref x (1 - 0.09)`, the middle of those, and `tolerance` overrides it.

A rule's `tolerance` is the one number its file sets (rtol, the 0.95 floor's 0.05, the 0.06 margin, the 9 %
below the measured AL); `needed` is, per measured run, the smallest tolerance at which that run passes, so the
false-alarm rate at a tolerance is the share of healthy runs whose need exceeds it and the threshold mtpbench
sets for a target false-alarm rate is that quantile of the healthy needs.

How a run at the rule's size is made from the stored one (`at_size`): the stored prompts are resized to the
rule's prompt count (an evenly spaced subset, or the prompts repeated), a prompt that stopped before the stored
run's max_tokens stops there again, and one the stored run cut at max_tokens runs to the rule's max_tokens.
The golden a rule compares with: under greedy repeatability, the expected counts of the healthy build; under
the bursty model, one independent draw (an upstream golden is one measured run). The smallest drop caught
90 % of the time scales each healthy draw by the drop's effect on the expected statistic (the spread is the
healthy build's); the 5 % and collapse powers are simulated draws of the dropped build. Nothing here prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from mtpbench.judge.noise import BURSTS, Truth, al_scale, gemma_truth, resize, simulate

Statistic = Literal["pooled", "per-request-mean"]
AlPart = Literal["floor", "two-sided", "strict-floor"]
PosPart = Literal["rtol", "margin"]

SEED = 39
REPS = 200  # draws per scenario: seconds per rule; --reps raises it (docs/calibration.md used 1000)
DROP_PCT = 5.0
POWER_GOAL = 0.90
FALSE_ALARM_GOAL = 0.01
# The seed's collapse (baselines/gemma4-mtp-v0.26.0rc1.yaml): mean acceptance 94.8 % (98.2/96.3/89.9) fell
# to 5.3 % in one process; applied to a run as its mean acceptance rate scaled by 5.3 / 94.8.
COLLAPSE_FROM_PCT = 94.8
COLLAPSE_TO_PCT = 5.3
NOISE = "bursty"  # the gate-power benchmark's level the gate is measured under


@dataclass(frozen=True)
class Rule:
    name: str
    project: str
    source: str  # the file and lines the rule follows
    statistic: Statistic  # what the AL is: pooled counters, or the mean of per-prompt ALs
    prompts: int
    max_tokens: int
    tolerance: float
    al: AlPart | None
    positions: PosPart | None = None
    notes: str = ""


RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule(
            "vllm-acceptance-rates",
            "vLLM",
            "vllm-project/vllm tests/v1/e2e/spec_decode/acceptance_rates/utils.py@025aa2e8 run_acceptance_length_eval "
            "l.57-98",
            "per-request-mean",
            164,
            2048,
            0.05,
            "floor",
            notes="min(200, dataset) prompts: HumanEval's 164",
        ),
        Rule(
            "vllm-acceptance-length",
            "vLLM",
            "vllm-project/vllm tests/v1/spec_decode/test_acceptance_length.py@029ba375 DEFAULT_* constants, "
            "extract_acceptance_metrics, test_eagle3_acceptance_length's asserts",
            "pooled",
            80,
            256,
            0.05,
            "two-sided",
            "rtol",
        ),
        Rule(
            "vllm-ascend-golden",
            "vllm-ascend",
            "vllm-project/vllm-ascend tests/e2e/pull_request/one_card/spec_decode/test_gemma4_mtp.py "
            "(vllm-ascend#16394)",
            "pooled",
            15,
            256,
            0.06,
            None,
            "margin",
        ),
        Rule(
            "trtllm-min-al",
            "TensorRT-LLM",
            "NVIDIA/TensorRT-LLM tests/integration/defs/accuracy/accuracy_core.py compute_acceptance_length, "
            "assert_acceptance_length",
            "pooled",
            1319,
            256,
            0.05,
            "floor",
            notes="the GSM8K task's sample (NUM_SAMPLES 1319, MAX_OUTPUT_LEN 256)",
        ),
        Rule(
            "sglang-threshold",
            "SGLang",
            "sgl-project/sglang python/sglang/test/kits/gsm8k_accuracy_kit.py GSM8KMixin.test_gsm8k",
            "pooled",
            200,
            512,
            0.09,
            "strict-floor",
            notes="threshold ref x 0.91 (hand-set upstream)",
        ),
    )
}


@dataclass(frozen=True)
class Measure:
    """What an upstream test reads off a run, one row per run: its AL (in the rule's definition) and the pooled
    per-position rates (accepted_i / drafts, fractions)."""

    al: np.ndarray  # (R,)
    per_pos: np.ndarray  # (R, K)


def measure(drafts: np.ndarray, accepted: np.ndarray, statistic: Statistic) -> Measure:
    """drafts (R, P), accepted per position (R, P, K): each run's AL and pooled rates as upstream computes them.
    A prompt without drafts counts as AL 1 (compute_acceptance_len returns 1); pooled over no drafts, AL is 1
    and the rates 0 (extract_acceptance_metrics)."""
    d = drafts.astype(float)
    acc = accepted.astype(float)
    total = d.sum(axis=1)
    safe = np.where(total > 0, total, 1.0)
    per_pos = np.where(total[:, None] > 0, acc.sum(axis=1) / safe[:, None], 0.0)
    if statistic == "pooled":
        al = 1.0 + np.where(total > 0, acc.sum(axis=(1, 2)) / safe, 0.0)
    else:
        per_prompt = 1.0 + np.divide(acc.sum(axis=2), d, out=np.zeros_like(d), where=d > 0)
        al = per_prompt.mean(axis=1)
    return Measure(al, per_pos)


def passes(rule: Rule, run: Measure, golden: Measure, tolerance: float) -> np.ndarray:
    """Each run's verdict under the rule, written as the upstream assert is (see the module docstring)."""
    ok = np.ones(len(run.al), dtype=bool)
    g = golden.al
    if rule.al == "floor":
        ok &= run.al >= g * (1.0 - tolerance)
    elif rule.al == "strict-floor":
        ok &= run.al > g * (1.0 - tolerance)
    elif rule.al == "two-sided":
        ok &= np.abs(run.al - g) / g <= tolerance
    if rule.positions == "rtol":
        for i in range(run.per_pos.shape[1]):
            exp = golden.per_pos[:, i]
            ok &= (exp <= 0) | (run.per_pos[:, i] >= exp * (1.0 - tolerance))
    elif rule.positions == "margin":
        for i in range(run.per_pos.shape[1]):
            a, b = run.per_pos[:, i], golden.per_pos[:, i]
            ok &= (a >= b) | (b - a < tolerance)
    return ok


def needed(rule: Rule, run: Measure, golden: Measure) -> np.ndarray:
    """Per run, the smallest tolerance at which it passes (for the strict parts, the infimum: it passes at
    any tolerance above it)."""
    need = np.zeros(len(run.al))
    if rule.al in ("floor", "strict-floor"):
        need = np.maximum(need, 1.0 - run.al / golden.al)
    elif rule.al == "two-sided":
        need = np.maximum(need, np.abs(run.al - golden.al) / golden.al)
    for i in range(run.per_pos.shape[1]) if rule.positions else ():
        a, b = run.per_pos[:, i], golden.per_pos[:, i]
        if rule.positions == "rtol":
            need = np.maximum(need, np.where(b > 0, 1.0 - np.divide(a, b, out=np.ones_like(a), where=b > 0), 0.0))
        else:
            need = np.maximum(need, b - a)
    return need


def truth_of_counts(name: str, ids: list[str], drafts: np.ndarray, accepted: np.ndarray) -> Truth:
    """A stored run's per-prompt counts as the truth its healthy build draws from (prompts without drafts
    carry no rates and are left out)."""
    keep = drafts > 0
    d, acc = drafts[keep].astype(float), accepted[keep].astype(float)
    return Truth(name, tuple(i for i, k in zip(ids, keep, strict=True) if k), acc / d[:, None], d + acc.sum(axis=1))


def at_size(t: Truth, prompts: int, max_tokens: int, stored_max_tokens: int | None) -> Truth:
    """The truth at a rule's sample size (module docstring): a prompt cut by the stored run's max_tokens runs
    to the rule's; one that ended earlier ends there again, capped by the rule's max_tokens."""
    r = resize(t, prompts)
    # budget counts draft steps and accepted tokens; a prompt within 2 tokens of the cap was cut by it
    cut = np.zeros(len(r.budget), dtype=bool) if stored_max_tokens is None else r.budget >= stored_max_tokens - 2
    budget = np.where(cut, float(max_tokens), np.minimum(r.budget, float(max_tokens)))
    return replace(r, budget=budget)


def expected(t: Truth, scale: np.ndarray, statistic: Statistic) -> Measure:
    """The statistic of the build's expected counts (greedy repeatability: every run measures exactly this),
    with every prompt's conditional rates scaled by `scale` (a drop)."""
    cond = _conditional(t.rates) * scale
    rates = np.cumprod(np.clip(cond, 0.0, 1.0), axis=1)
    drafts = t.budget / (1.0 + rates.sum(axis=1))
    return measure(drafts[None, :], (rates * drafts[:, None])[None, :, :], statistic)


def _conditional(uncond: np.ndarray) -> np.ndarray:
    prev = np.concatenate([np.ones_like(uncond[:, :1]), uncond[:, :-1]], axis=1)
    return np.divide(uncond, prev, out=np.zeros_like(uncond), where=prev > 0)


def collapse_pct(t: Truth) -> float:
    """The AL drop, %, that takes the truth's mean acceptance rate to COLLAPSE_TO/COLLAPSE_FROM of itself."""
    d = t.expected_drafts
    rate_sum = float((t.rates.sum(axis=1) * d).sum() / d.sum())
    al = 1.0 + rate_sum
    return 100.0 * (1.0 - COLLAPSE_TO_PCT / COLLAPSE_FROM_PCT) * rate_sum / al


@dataclass(frozen=True)
class Operating:
    """A rule at one tolerance under one noise model."""

    noise: str  # greedy | bursty
    tolerance: float
    false_alarm: float
    power_drop: float  # at DROP_PCT
    power_collapse: float
    smallest_caught: float | None  # AL drop %, caught POWER_GOAL of the time; None: not even at the collapse
    reps: int  # 1 under greedy (deterministic)


@dataclass(frozen=True)
class Calibration:
    rule: Rule
    spread: str  # where the per-prompt spread came from
    prompts: int
    max_tokens: int
    golden: Measure  # the healthy build's expected statistic at the rule's size (one row)
    collapse_pct: float
    greedy: Operating
    bursty: Operating
    calibrated: Operating  # bursty, at the tolerance that holds the false-alarm rate to FALSE_ALARM_GOAL
    seed: int
    noise: str = NOISE


def _smallest(power_at: Callable[[float], float], top: float) -> float | None:
    """The smallest AL drop in (0, top] % whose power reaches POWER_GOAL (bisection; power rises with the drop)."""
    if power_at(top) < POWER_GOAL:
        return None
    lo, hi = 0.0, top
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power_at(mid) >= POWER_GOAL else (mid, hi)
    return hi


def _ratio(t: Truth, base: Measure, pct: float, statistic: Statistic) -> tuple[float, np.ndarray]:
    """The factor a pct % AL drop puts on the expected AL and on each pooled rate."""
    m = expected(t, al_scale(t, pct), statistic)
    per = np.divide(m.per_pos[0], base.per_pos[0], out=np.ones_like(m.per_pos[0]), where=base.per_pos[0] > 0)
    return float(m.al[0] / base.al[0]), per


def _greedy(rule: Rule, t: Truth, tolerance: float, collapse: float) -> Operating:
    base = expected(t, np.ones(t.rates.shape[1]), rule.statistic)

    def fails(pct: float) -> float:
        m = base if pct <= 0 else expected(t, al_scale(t, pct), rule.statistic)
        return float(not passes(rule, m, base, tolerance)[0])

    return Operating("greedy", tolerance, fails(0.0), fails(DROP_PCT), fails(collapse), _smallest(fails, collapse), 1)


def _bursty(
    rule: Rule, t: Truth, tolerance: float, collapse: float, draws: dict[str, Measure], golden: Measure
) -> Operating:
    healthy = draws["healthy"]
    base = expected(t, np.ones(t.rates.shape[1]), rule.statistic)

    def power_scaled(pct: float) -> float:
        al_f, pos_f = _ratio(t, base, pct, rule.statistic)
        moved = Measure(healthy.al * al_f, healthy.per_pos * pos_f)
        return float(1.0 - passes(rule, moved, golden, tolerance).mean())

    def rate(m: Measure) -> float:
        return float(1.0 - passes(rule, m, golden, tolerance).mean())

    return Operating(
        NOISE,
        tolerance,
        rate(healthy),
        rate(draws["drop"]),
        rate(draws["collapse"]),
        _smallest(power_scaled, collapse),
        len(healthy.al),
    )


def _draws(rule: Rule, t: Truth, collapse: float, reps: int, seed: int) -> tuple[dict[str, Measure], Measure]:
    """Bursty draws of the healthy build (twice: the goldens and the runs), of a DROP_PCT drop and of the
    collapse, each measured as the rule measures."""
    rng = np.random.default_rng(seed)
    burst = BURSTS[NOISE]
    k = t.rates.shape[1]
    out = {}
    gold_d, gold_a = simulate(t, np.ones(k), burst, reps, rng)
    for name, pct in (("healthy", 0.0), ("drop", DROP_PCT), ("collapse", collapse)):
        scale = np.ones(k) if pct <= 0 else al_scale(t, pct)
        d, a = simulate(t, scale, burst, reps, rng)
        out[name] = measure(d, a, rule.statistic)
    return out, measure(gold_d, gold_a, rule.statistic)


def calibrate(
    rule: Rule,
    truth: Truth,
    spread: str,
    stored_max_tokens: int | None,
    reps: int = REPS,
    seed: int = SEED,
    tolerance: float | None = None,
) -> Calibration:
    """The rule (at `tolerance`, default its own) on `truth` resized to its sample size, under both noise
    models, and the tolerance that holds its false-alarm rate to FALSE_ALARM_GOAL under the bursty one."""
    t = at_size(truth, rule.prompts, rule.max_tokens, stored_max_tokens)
    tol = rule.tolerance if tolerance is None else tolerance
    collapse = collapse_pct(t)
    base = expected(t, np.ones(t.rates.shape[1]), rule.statistic)
    draws, golden = _draws(rule, t, collapse, reps, seed)
    need = needed(rule, draws["healthy"], golden)
    # The quantile of the healthy needs; a strict rule passes only above its need, so the next float up.
    calibrated = float(np.quantile(need, 1.0 - FALSE_ALARM_GOAL, method="higher"))
    calibrated = max(calibrated, 0.0)
    if rule.al == "strict-floor" or rule.positions == "margin":
        calibrated = math.nextafter(calibrated, math.inf)
    return Calibration(
        rule,
        spread,
        rule.prompts,
        rule.max_tokens,
        base,
        collapse,
        _greedy(rule, t, tol, collapse),
        _bursty(rule, t, tol, collapse, draws, golden),
        _bursty(rule, t, calibrated, collapse, draws, golden),
        seed,
    )


def gemma_like() -> Truth:
    """The gate-power benchmark's Gemma4-like population (160 prompts, 32-231 drafts, pooled 98/96/90 %)."""
    return gemma_truth(160)
