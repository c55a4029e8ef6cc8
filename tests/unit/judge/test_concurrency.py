"""A serving concurrency sweep (`workload.concurrency: [1, 4, 16]`) judged on constructed runs in the on-disk
format (tests/support/serving_runs.py): each level held against the first by the divergence rule the modes use and named
as a mode-divergence of `concurrency`, per-level rows in the serving table, a single int unchanged. The real
server runs the sweep in tests/engine/test_serving_sweep_engine.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from mtpbench.errors import ExitCode, NotComparableError
from mtpbench.judge.compare import judge
from mtpbench.judge.evidence import collect_evidence
from mtpbench.judge.findings import FAIL
from mtpbench.judge.findings.features import FeatureChange
from mtpbench.judge.plan import make_plan
from mtpbench.judge.signals import serving_summary as ss
from mtpbench.judge.signals.concurrency import sweep_levels
from mtpbench.judge.sizing import family_of_config
from mtpbench.render import serving as rs
from mtpbench.render.words import finding_message
from mtpbench.specs import ServingWorkload
from mtpbench.store.baseline import Baseline, BaselineEntry, ServingBaselineEntry
from mtpbench.store.results import load_run
from tests.support.serving_runs import GOOD, write_serving_run, write_sweep_run

# Sixteen requests over eight prompts (round-robin): each prompt's requests accept alike, as greedy ones do.
PROMPTS = 8
CLEAN = [GOOD[i % PROMPTS % len(GOOD)] for i in range(16)]
# The drafts still run, but past position 0 little is accepted: the collapse llama.cpp#27117 saw at 16.
COLLAPSED = [([9, 1 + i % PROMPTS % 2, 0], 10) for i in range(16)]


def test_a_collapsed_level_is_a_mode_divergence_naming_the_level(tmp_path: Path) -> None:
    run = load_run(write_sweep_run(tmp_path, {1: CLEAN, 4: CLEAN, 16: COLLAPSED}, prompts=PROMPTS))
    comp = judge(run)
    found = [d for d in comp.diagnoses if d.kind == "mode-divergence"]
    (d,) = found  # level 4 accepted as level 1 did: only 16 is named
    assert d.severity == FAIL and d.cell == "current/eager/stock"
    assert d.numbers["features"] == [{"name": "concurrency", "reference": 1, "mode": 16}]
    assert d.numbers["mode"] == "eager at concurrency 16" and d.numbers["reference_mode"] == "eager at concurrency 1"
    assert d.numbers["prompts"] == PROMPTS  # paired by the prompt each request was sent, not by request
    message = finding_message(d)
    assert message.startswith("concurrency=1 → 16: mode eager at concurrency 16 differs from eager at concurrency 1")
    assert comp.exit_code == ExitCode.REGRESSION


def test_a_clean_sweep_passes(tmp_path: Path) -> None:
    run = load_run(write_sweep_run(tmp_path, {1: CLEAN, 4: CLEAN, 16: CLEAN}, prompts=PROMPTS))
    comp = judge(run)
    assert not [d for d in comp.diagnoses if d.kind in ("mode-divergence", "inconclusive")], comp.diagnoses
    assert comp.exit_code == ExitCode.OK


def test_the_sweep_adds_its_checks_to_the_false_alarm_family(tmp_path: Path) -> None:
    swept = load_run(write_sweep_run(tmp_path / "a", {1: CLEAN, 4: CLEAN, 16: CLEAN}, prompts=PROMPTS))
    single = load_run(write_serving_run(tmp_path / "b", {"current/eager/stock": CLEAN}))
    # k=3 positions for each of the two levels after the first, one cell
    assert make_plan(collect_evidence(swept)).family - make_plan(collect_evidence(single)).family == 3 * 2


def test_dry_run_sizing_counts_the_sweep_as_the_plan_does() -> None:
    cells = [("current", "eager", "stock")]
    family, divergence = family_of_config(3, cells, "eager", levels=3)
    assert divergence == 3 * 2 and family - family_of_config(3, cells, "eager")[0] == 3 * 2


def test_the_serving_table_shows_one_row_per_level(tmp_path: Path) -> None:
    run = load_run(write_sweep_run(tmp_path, {1: CLEAN, 4: CLEAN, 16: COLLAPSED}, wall_s=4.0, prompts=PROMPTS))
    (cell,) = ss.summarize_serving(run)
    assert [lv.concurrency for lv in cell.levels] == [1, 4, 16]
    assert cell.requests_total == 48 and cell.requests_ok == 48  # 16 requests at each of three levels
    one, _, sixteen = cell.levels
    assert one.requests_ok == 16 and one.requests_total == 16 and one.req_per_s == pytest.approx(4.0)
    assert sixteen.pooled_per_pos == pytest.approx([0.9, 0.15, 0.0])
    assert one.pooled_per_pos[2] == pytest.approx(sum(p[2] for p, _ in CLEAN) / 160)
    assert one.counts_match == [True]
    md = rs.serving_markdown([cell])
    rows = [line for line in md.splitlines() if "└ concurrency" in line]
    assert [r.split("|")[1].strip("` ") for r in rows] == ["└ concurrency 1", "└ concurrency 4", "└ concurrency 16"]
    assert "| 90.0 | 15.0 | 0.0 |" in rows[2]


def test_a_single_int_is_no_sweep(tmp_path: Path) -> None:
    run = load_run(write_serving_run(tmp_path, {"current/eager/stock": CLEAN}, concurrency=16))
    assert sweep_levels(run) == []
    (cell,) = ss.summarize_serving(run)
    assert cell.levels == [] and cell.requests_total == 16
    assert "└" not in rs.serving_markdown([cell])


def test_the_workload_takes_a_list_and_refuses_bad_levels() -> None:
    assert ServingWorkload(kind="serving", concurrency=[1, 4, 16]).concurrency == [1, 4, 16]
    assert ServingWorkload(kind="serving", concurrency=8).concurrency == 8
    for bad, words in (([1, 4, 4], "repeat"), ([1, 0], "out of range"), ([], "at least one"), (2000, "out of range")):
        with pytest.raises(ValidationError, match=words):
            ServingWorkload(kind="serving", concurrency=bad)


def test_a_baseline_of_another_sweep_is_not_comparable(tmp_path: Path) -> None:
    run = load_run(write_sweep_run(tmp_path, {1: CLEAN, 4: CLEAN, 16: CLEAN}, prompts=PROMPTS))

    def baseline(concurrency: int | list[int]) -> Baseline:
        # only what select_baseline reads: the entry's serving load
        serving = ServingBaselineEntry(concurrency=concurrency, max_tokens=64)
        entry = BaselineEntry.model_construct(build="current", mode="eager", serving=serving)
        return Baseline.model_construct(name="b", entries=[entry])

    kept, _ = ss.select_baseline(run, baseline([1, 4, 16]))
    assert len(kept.entries) == 1
    for other in (16, [1, 16]):
        with pytest.raises(NotComparableError, match=r"workload\.concurrency"):
            ss.select_baseline(run, baseline(other))


def test_the_finding_names_the_feature_in_its_payload(tmp_path: Path) -> None:
    run = load_run(write_sweep_run(tmp_path, {1: CLEAN, 16: COLLAPSED}, prompts=PROMPTS))
    comp = judge(run)
    (d,) = [d for d in comp.diagnoses if d.kind == "mode-divergence"]
    assert d.payload.features == [FeatureChange(name="concurrency", reference=1, mode=16)]
