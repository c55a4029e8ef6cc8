"""Builds side by side (issue 28, part 3): every build held against the reference build (`reference_build`,
default the first listed) at the same mode and variant, paired by prompt by divergence's rule. A build that
accepts less is a failing `build-divergence` naming both builds, the position, Δ and the prompts that moved;
identical builds pass; a build that accepts more is told, not failed. Constructed runs
(tests/support/synthetic_runs.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import yaml

from mtpbench.errors import ExitCode
from mtpbench.judge.compare import judge
from mtpbench.judge.findings import Cause, Kind, Severity
from mtpbench.render.report import comparison_json
from mtpbench.render.words import CAUSE_TEXT, finding_message
from mtpbench.store.results import load_run
from tests.support.cli import invoke, one_error_line
from tests.support.synthetic_runs import PROMPTS

REPO = Path(__file__).resolve().parents[3]
GOOD = [98.2, 96.3, 89.9]
# A release whose drafter loses 30 points at pos2 on every prompt, with the same text (the DFlash 0.28.0 shape).
PLANTED = [98.2, 80.0, 59.9]
BETTER = [98.2, 97.0, 96.0]


def found(comp: object, kind: Kind) -> list:
    return [d for d in comp.diagnoses if d.kind == kind]  # type: ignore[attr-defined]


def test_a_build_that_accepts_less_than_the_reference_build_fails_naming_it(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run(
            {"v0.27.1/eager/stock": [GOOD], "v0.28.0/eager/stock": [PLANTED], "v0.29.0/eager/stock": [GOOD]},
            baseline=None,
        )
    )
    comp = judge(run)
    div = found(comp, Kind.BUILD_DIVERGENCE)
    assert [d.cell for d in div] == ["v0.28.0/eager/stock"] and div[0].severity == Severity.FAIL
    n = div[0].numbers
    assert n["check"] == "build-divergence" and n["build"] == "v0.28.0" and n["reference_build"] == "v0.27.1"
    assert n["reference"] == "v0.27.1/eager/stock" and n["pos"] == 2 and n["prompts"] == len(PROMPTS)
    assert abs(n["delta"] - (-0.30)) < 0.01 and n["same_text"] is True
    assert n["prompts_differing"] == len(PROMPTS) and sorted(n["differing"]) == sorted(PROMPTS)
    text = finding_message(div[0])
    assert text.startswith("build v0.28.0 accepts less than reference build v0.27.1 in mode eager: pos2 59.9 % vs")
    assert "-30.0 pts" in text and "5 prompts moved at pos2: " in text
    assert div[0].cause == Cause.BUILD_CHANGE and "bisect" in CAUSE_TEXT[div[0].cause]
    assert comp.exit_code == ExitCode.REGRESSION
    # The JSON document carries it, with its numbers.
    doc = json.loads(comparison_json(comp))
    rows = [d for d in doc["findings"] if d["kind"] == "build-divergence"]
    assert rows and rows[0]["exit_code"] == 1 and rows[0]["numbers"]["differing"] == n["differing"]


def test_identical_builds_pass(make_run: Callable[..., Path]) -> None:
    run = load_run(make_run({"v0.27.1/eager/stock": [GOOD], "v0.32.0/eager/stock": [GOOD]}, baseline=None))
    comp = judge(run)
    assert not found(comp, Kind.BUILD_DIVERGENCE) and not found(comp, Kind.INCONCLUSIVE)
    assert comp.exit_code == ExitCode.OK


def test_reference_build_names_the_build_the_others_are_held_against(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run({"old/eager/stock": [PLANTED], "new/eager/stock": [GOOD]}, baseline=None, reference_build="new")
    )
    div = found(judge(run), Kind.BUILD_DIVERGENCE)
    assert [d.cell for d in div] == ["old/eager/stock"] and div[0].numbers["reference_build"] == "new"


def test_a_build_that_accepts_more_is_told_not_failed(make_run: Callable[..., Path]) -> None:
    run = load_run(make_run({"old/eager/stock": [GOOD], "new/eager/stock": [BETTER]}, baseline=None))
    comp = judge(run)
    div = found(comp, Kind.BUILD_DIVERGENCE)
    assert len(div) == 1 and div[0].severity == Severity.WARN and div[0].numbers["delta"] > 0.05
    assert "accepts more than reference build old" in finding_message(div[0])
    assert comp.exit_code == ExitCode.OK


def test_each_mode_is_held_against_the_reference_builds_same_mode(make_run: Callable[..., Path]) -> None:
    # The later build's compiled mode alone regresses; its eager mode and the graph pair of the first are fine.
    run = load_run(
        make_run(
            {
                "a/eager/stock": [GOOD],
                "a/compiled/stock": [GOOD],
                "b/eager/stock": [GOOD],
                "b/compiled/stock": [PLANTED],
            },
            baseline=None,
        )
    )
    comp = judge(run)
    div = found(comp, Kind.BUILD_DIVERGENCE)
    assert [(d.cell, d.numbers["reference"]) for d in div] == [("b/compiled/stock", "a/compiled/stock")]


def test_only_the_prompts_that_moved_are_named(make_run: Callable[..., Path]) -> None:
    # Greedy: each prompt's exact counts against the same prompt's. Two of five prompts lose pos2 entirely.
    same = [(200, [196, 193, 180])] * len(PROMPTS)
    moved = [(200, [196, 193, 0]) if p in ("class", "unit-test") else (200, [196, 193, 180]) for p in PROMPTS]
    run = load_run(
        make_run(
            {"a/eager/stock": [GOOD], "b/eager/stock": [GOOD]},
            baseline=None,
            per_prompt={"a/eager/stock": [same], "b/eager/stock": [moved]},
        )
    )
    div = found(judge(run), Kind.BUILD_DIVERGENCE) + found(judge(run), Kind.INCONCLUSIVE)
    assert len(div) == 1
    n = div[0].numbers
    assert n["pos"] == 2 and n["prompts_differing"] == 2 and sorted(n["differing"]) == ["class", "unit-test"]


def test_sampled_runs_pair_builds_by_prompt_too(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run({"a/eager/stock": [GOOD, GOOD], "b/eager/stock": [PLANTED, PLANTED]}, baseline=None, temperature=1.0)
    )
    div = found(judge(run), Kind.BUILD_DIVERGENCE)
    assert [d.cell for d in div] == ["b/eager/stock"] and div[0].severity == Severity.FAIL
    assert div[0].cause == Cause.NONE  # sampled text differs by chance: no cause named from it


def test_build_pairs_count_in_the_family(make_run: Callable[..., Path]) -> None:
    one = judge(load_run(make_run({"a/eager/stock": [GOOD]}, baseline=None)))
    two = judge(load_run(make_run({"a/eager/stock": [GOOD], "b/eager/stock": [GOOD]}, baseline=None)))
    assert one.family == 0 and two.family == 3  # k = 3 checks for the one build pair


def test_an_unknown_reference_build_is_one_line_exit_2(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "configs" / "tiny-gemma4-mtp.yaml").read_text(encoding="utf-8"))
    data["reference_build"] = "v9.9.9"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(data), encoding="utf-8")
    res = invoke("run", cfg, "--dry-run")
    assert res.exit_code == ExitCode.USAGE, res.output
    line = one_error_line(res)
    assert "reference_build" in line and "v9.9.9" in line
