"""Upstream goldens as baselines (issue 20): constructed runs judged against each shipped upstream baseline in
its own definition and by its own rule, as the upstream test asserts it, beside mtpbench's statistical verdict.

The rules mirror, line for line:
- vLLM tests/v1/spec_decode/test_acceptance_length.py @029ba375 (test_eagle3_acceptance_length): pooled AL,
  `abs(actual - expected) / expected <= DEFAULT_RTOL` and, where expected_i > 0, `actual_i >= exp_i * (1 - rtol)`;
- vLLM tests/v1/e2e/spec_decode/acceptance_rates/utils.py @025aa2e8 (run_acceptance_length_eval) with
  tests/v1/e2e/spec_decode/utils.py @08de63b4 (compute_acceptance_len): per-request AL, 1 for a request
  without drafts, averaged over requests, `mean >= expected_len * 0.95`;
- vllm-ascend tests/e2e/pull_request/one_card/spec_decode/test_gemma4_mtp.py (PR #16394's golden):
  `(a >= b) or (b - a < 0.06)` per position.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtpbench.errors import ExitCode, UserError
from mtpbench.judge.compare import judge
from mtpbench.judge.findings import Kind, Severity
from mtpbench.judge.signals.upstream import measure
from mtpbench.judge.stats import PromptCounts
from mtpbench.render.words import finding_message
from mtpbench.store.baseline import load_baseline
from mtpbench.store.results import load_run

BASELINES = Path(__file__).resolve().parents[3] / "baselines"
LLAMA = BASELINES / "vllm-llama3.1-8b-eagle3-mt-bench.yaml"
GEMMA_MT = BASELINES / "vllm-gemma4-e4b-mtp-mt-bench.yaml"
ASCEND = BASELINES / "vllm-ascend-gemma4-31b-mtp-coding.yaml"
CELL = "vllm/default/stock"


def run_for(make_run: Callable[..., Path], baseline: Path, prompts: list[tuple[int, list[int]]]) -> Any:
    """A one-repeat run of five prompts with these (drafts, accepted_per_pos), in the baseline's own setup
    (method, k, max_tokens), whose config names the baseline (as the shipped configs do)."""
    b = load_baseline(baseline)
    k = b.fingerprint.num_speculative_tokens
    path = make_run(
        {CELL: [[0.0] * k]}, k=k, method=b.fingerprint.method, baseline=str(baseline), per_prompt={CELL: [prompts]}
    )
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["config"]["sampling"]["max_tokens"] = b.fingerprint.sampling["max_tokens"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    return load_run(path)


def even(rates: list[float], drafts: int = 10_000) -> list[tuple[int, list[int]]]:
    """Five prompts of equal counts whose pooled unconditional rates are `rates` exactly."""
    return [(drafts, [round(r * drafts) for r in rates])] * 5


def upstream_finding(comp: Any) -> Any:
    found = [d for d in comp.diagnoses if d.kind == Kind.UPSTREAM_RULE]
    assert len(found) == 1
    return found[0]


def test_eagle3_golden_passes_its_own_rule_at_the_golden(make_run: Callable[..., Path]) -> None:
    comp = judge(run_for(make_run, LLAMA, even([0.7296, 0.5208, 0.3545])), load_baseline(LLAMA))
    f = upstream_finding(comp)
    n = f.numbers
    assert n["upstream"] == "pass" and n["failed"] == [] and n["definition"] == "pooled"
    assert n["al"] == pytest.approx(1 + 0.7296 + 0.5208 + 0.3545)  # pooled: 1 + Σ positions
    assert n["al_limits"] == pytest.approx([2.60 * 0.95, 2.60 * 1.05])
    assert n["pos_minimums"] == pytest.approx([0.7296 * 0.95, 0.5208 * 0.95, 0.3545 * 0.95])
    assert n["conditional"] == pytest.approx([0.7296, 0.5208 / 0.7296, 0.3545 / 0.5208])
    # Counts equal to the golden rates at every prompt: mtpbench's gate passes too, and they agree.
    assert n["statistical"] == "pass" and not n["disagree"] and f.severity == Severity.INFO
    assert comp.exit_code == ExitCode.OK
    assert "upstream rule: PASS" in finding_message(f) and "029ba375" in finding_message(f)


def test_eagle3_position_below_its_floor_fails_upstream(make_run: Callable[..., Path]) -> None:
    # pos2 at 0.336 < 0.3545 x 0.95 = 0.3368, while AL 2.58 stays within 5 % of 2.60.
    comp = judge(run_for(make_run, LLAMA, even([0.7296, 0.5208, 0.336])), load_baseline(LLAMA))
    f = upstream_finding(comp)
    assert f.numbers["upstream"] == "fail" and f.numbers["failed"] == ["pos2"]
    assert f.severity == Severity.FAIL and comp.exit_code == ExitCode.REGRESSION
    # A 1.85-point drop at pos2 is below mtpbench's δ of 5 points: the gate itself passes, and says they disagree.
    assert f.numbers["statistical"] == "pass" and f.numbers["disagree"]


def test_eagle3_acceptance_length_is_two_sided_upstream(make_run: Callable[..., Path]) -> None:
    # An AL 10 % above the golden fails upstream's abs(actual - expected) / expected <= 0.05.
    comp = judge(run_for(make_run, LLAMA, even([0.80, 0.60, 0.46])), load_baseline(LLAMA))
    f = upstream_finding(comp)
    assert f.numbers["failed"] == ["al"] and f.numbers["upstream"] == "fail"
    assert f.numbers["statistical"] == "improvement" and f.numbers["disagree"]
    assert comp.exit_code == ExitCode.REGRESSION


# (drafts, accepted per position) of five prompts, k=2, one of them without a draft at all.
REQUESTS = [(100, [80, 70]), (0, [0, 0]), (50, [48, 42]), (80, [70, 58]), (10, [10, 10])]


def test_per_request_mean_al_matches_a_hand_computation() -> None:
    ev = PromptCounts(
        tuple("abcde"),
        np.array([d for d, _ in REQUESTS]),
        np.array([2 * d for d, _ in REQUESTS]),
        np.array([sum(a) for _, a in REQUESTS]),
        np.array([a for _, a in REQUESTS]),
    )
    m = measure(ev)
    # 1 + 150/100, 1 (no drafts: compute_acceptance_len returns 1), 1 + 90/50, 1 + 128/80, 1 + 20/10
    assert m.request_mean_al == pytest.approx((2.5 + 1.0 + 2.8 + 2.6 + 3.0) / 5)  # 2.38
    assert m.pooled_al == pytest.approx(1 + 388 / 240)  # the pooled definition is another number: 2.617
    assert m.per_pos == pytest.approx([208 / 240, 180 / 240])


def test_gemma4_per_request_golden_is_judged_in_its_own_definition(make_run: Callable[..., Path]) -> None:
    comp = judge(run_for(make_run, GEMMA_MT, REQUESTS), load_baseline(GEMMA_MT))
    f = upstream_finding(comp)
    assert f.numbers["definition"] == "per-request-mean"
    assert f.numbers["al"] == pytest.approx(2.38)  # not the pooled 2.617
    assert f.numbers["upstream"] == "pass" and f.numbers["al_limits"] == pytest.approx([2.28 * 0.95, None])
    # Five prompts this uneven cannot certify that the mean is within 5 % of 2.28: mtpbench says
    # inconclusive (exit 5) where upstream passes, and the finding says they disagree.
    assert f.numbers["statistical"] == "inconclusive" and f.numbers["disagree"]
    assert not comp.checks  # the baseline has no per-position rates to check
    assert comp.exit_code == ExitCode.INCONCLUSIVE
    assert any(d.kind == Kind.REQUEST_AL_INCONCLUSIVE for d in comp.diagnoses)


def test_gemma4_per_request_golden_fails_below_its_floor(make_run: Callable[..., Path]) -> None:
    # Every prompt at AL 2.1 < 2.28 x 0.95 = 2.166.
    comp = judge(run_for(make_run, GEMMA_MT, [(100, [60, 50])] * 5), load_baseline(GEMMA_MT))
    f = upstream_finding(comp)
    assert f.numbers["al"] == pytest.approx(2.1) and f.numbers["upstream"] == "fail" and f.numbers["failed"] == ["al"]
    assert f.numbers["statistical"] == "regression" and not f.numbers["disagree"]
    assert comp.exit_code == ExitCode.REGRESSION


def test_gemma4_per_request_golden_passes_at_the_golden(make_run: Callable[..., Path]) -> None:
    comp = judge(run_for(make_run, GEMMA_MT, [(100, [70, 58])] * 5), load_baseline(GEMMA_MT))
    f = upstream_finding(comp)
    assert f.numbers["al"] == pytest.approx(2.28) and f.numbers["upstream"] == "pass"
    assert f.numbers["statistical"] == "pass" and comp.exit_code == ExitCode.OK


@pytest.mark.parametrize(
    ("rates", "failed"),
    [
        ([0.94, 0.90, 0.84], []),  # at the golden
        ([0.89, 0.85, 0.79], []),  # 0.05 below everywhere: within the 0.06 margin
        # On the edge: 0.94 - 0.88 is 0.05999999999999994 in floating point, < 0.06, so upstream passes it too.
        ([0.88, 0.86, 0.84], []),
        ([0.87, 0.86, 0.84], ["pos0"]),
        ([0.94, 0.90, 0.70], ["pos2"]),
    ],
)
def test_ascend_golden_absolute_margin_as_upstream_writes_it(
    make_run: Callable[..., Path], rates: list[float], failed: list[str]
) -> None:
    comp = judge(run_for(make_run, ASCEND, even(rates, 1000)), load_baseline(ASCEND))
    f = upstream_finding(comp)
    assert f.numbers["failed"] == failed
    assert f.numbers["upstream"] == ("fail" if failed else "pass")
    assert (f.severity == Severity.FAIL) == bool(failed)
    assert "vllm-ascend#16394" in f.numbers["source"]


def test_every_shipped_upstream_baseline_loads_with_provenance() -> None:
    for path in sorted(BASELINES.glob("vllm*.yaml")):
        b = load_baseline(path)
        up = b.upstream
        assert up is not None and up.source.repository.startswith("vllm-project/") and up.source.date
        assert up.source.commit or up.source.pull_request


def _baseline_text(upstream: str, rates: str = "[70.0, 50.0, 30.0]") -> str:
    return (
        f"schema: 1\nname: x\nprovenance: {{source: s}}\nfingerprint: {{method: mtp, num_speculative_tokens: 3}}\n"
        f"entries:\n  - {{rates_pct: {rates}}}\n{upstream}"
    )


@pytest.mark.parametrize(
    ("upstream", "rates", "says"),
    [
        (
            "upstream: {definition: pooled, rule: {al_rtol: 0.05}, source: {repository: r, file: f, commit: abcdef0, "
            "date: d}}\n",
            "[70.0, 50.0, 30.0]",
            "needs the golden al",
        ),
        ("", "null", "no upstream golden"),
        (
            "upstream: {definition: pooled, per_pos: [0.7, 0.5], rule: {pos_rtol: 0.05}, source: {repository: r, "
            "file: f, commit: abcdef0, date: d}}\n",
            "[70.0, 50.0, 30.0]",
            "upstream.per_pos: 2 positions",
        ),
        (
            "upstream: {definition: pooled, al: 2.0, rule: {al_rtol: 0.05}, source: {repository: r, file: f, "
            "commit: null, date: d}}\n",
            "[70.0, 50.0, 30.0]",
            "the pull request",
        ),
    ],
)
def test_an_upstream_block_that_cannot_be_applied_is_refused(
    tmp_path: Path, upstream: str, rates: str, says: str
) -> None:
    p = tmp_path / "b.yaml"
    p.write_text(_baseline_text(upstream, rates))
    with pytest.raises(UserError, match=says):
        load_baseline(p)


def test_size_of_a_baseline_without_rates_says_so_instead_of_crashing() -> None:
    # Regression: `size` took k from the first entry's rates, None in a per-request AL golden (exit 3, TypeError).
    from typer.testing import CliRunner

    from mtpbench.cli import app

    res = CliRunner().invoke(app, ["size", str(GEMMA_MT)], env={"MTPBENCH_WIDTH": "200", "COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    # Issue 30: no per-prompt counts is no longer "nothing to size from": a stated prior answers.
    assert "stated prior" in res.output and "prompts needed: " in res.output
