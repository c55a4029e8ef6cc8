"""The gate's verdicts on fixed vectors: the published v0.26.0rc1 figures against the seed's broken runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import PUBLISHED

from mtpbench.baseline import load_baseline
from mtpbench.compare import analyze, compare
from mtpbench.errors import ExitCode, NotComparableError
from mtpbench.results import load_run

BROKEN_A = [11.7, 3.0, 1.3]  # the seed's buggy FULL_DECODE_ONLY process with the "wrong" group first
BROKEN_B = [77.8, 56.0, 38.4]
GOOD = [98.2, 96.3, 89.9]


def kinds(comp, severity: str = "fail") -> set[str]:
    return {d.kind for d in comp.diagnoses if d.severity == severity}


@pytest.mark.parametrize("rates", [BROKEN_A, BROKEN_B])
def test_published_baseline_flags_seed_regression(make_run: Callable[..., Path], rates: list[float]) -> None:
    run = load_run(make_run({"ascend/FULL_DECODE_ONLY/stock": [rates]}))
    comp = compare(run, load_baseline(PUBLISHED))
    assert comp.exit_code == ExitCode.REGRESSION
    assert kinds(comp) == {"regression"}
    assert [c.verdict for c in comp.checks] == ["regression"] * 3
    assert comp.checks[0].base_rate == pytest.approx(0.982)
    assert comp.checks[0].delta == pytest.approx(rates[0] / 100 - 0.982, abs=1e-3)


def test_two_disagreeing_repeats_are_regression_and_instability(make_run: Callable[..., Path]) -> None:
    run = load_run(make_run({"ascend/FULL_DECODE_ONLY/stock": [BROKEN_A, BROKEN_B]}, seeds=[2, 0]))
    comp = compare(run, load_baseline(PUBLISHED))
    assert comp.exit_code == ExitCode.REGRESSION
    assert kinds(comp) == {"regression", "cross-process-instability"}
    inst = next(d for d in comp.diagnoses if d.kind == "cross-process-instability")
    assert inst.numbers["pos"] == 0  # the widest spread: 11.7 vs 77.8
    assert inst.numbers["spread"] == pytest.approx(0.661, abs=1e-3)
    assert "PYTHONHASHSEED=2: 11.7 %" in inst.message and "PYTHONHASHSEED=0: 77.8 %" in inst.message
    assert "set/dict" in inst.cause


def test_rerun_identical_within_noise_passes(make_run: Callable[..., Path]) -> None:
    run = load_run(make_run({"ascend/NONE/stock": [[98.0, 96.5, 89.0], [98.4, 96.1, 90.3], [97.9, 96.0, 89.6]]}))
    comp = compare(run, load_baseline(PUBLISHED))
    assert comp.exit_code == ExitCode.OK
    assert {c.verdict for c in comp.checks} == {"pass"}
    assert not kinds(comp)


def test_drop_within_tolerance_passes_and_beyond_fails(make_run: Callable[..., Path]) -> None:
    baseline = load_baseline(PUBLISHED)
    ok = compare(load_run(make_run({"ascend/NONE/stock": [[94.0, 92.0, 86.0]]})), baseline)
    assert ok.exit_code == ExitCode.OK  # 4.2 / 4.3 / 3.9 points down, tolerance 5
    bad = compare(load_run(make_run({"ascend/NONE/stock": [[92.0, 92.0, 89.9]]})), baseline)
    assert [c.verdict for c in bad.checks] == ["regression", "pass", "pass"]


def test_drop_without_statistical_support_is_not_a_regression(make_run: Callable[..., Path], tmp_path: Path) -> None:
    # A baseline with counts, and a run of only 3 drafts: 23 points down, but the interval spans zero.
    base_run = load_run(make_run({"cpu/eager/stock": [[90.0, 80.0, 70.0]]}, drafts=100))
    from mtpbench.baseline import baseline_from_cells, write_baseline
    from mtpbench.compare import collect

    cell = collect(base_run)[0]
    counts = {
        "num_drafts": cell.summary.counts.num_drafts,
        "num_draft_tokens": cell.summary.counts.num_draft_tokens,
        "num_accepted_tokens": cell.summary.counts.num_accepted_tokens,
        "accepted_per_pos": list(cell.summary.counts.accepted_per_pos),
    }
    b = baseline_from_cells(base_run, "b", [("cpu", "eager", counts, 1)])
    write_baseline(b, tmp_path / "b.yaml", force=False)
    small = load_run(make_run({"cpu/eager/stock": [[66.7, 66.7, 66.7]]}, drafts=3))
    comp = compare(small, load_baseline(tmp_path / "b.yaml"))
    assert comp.checks[0].delta == pytest.approx(0.667 - 0.9, abs=1e-2)
    assert comp.checks[0].verdict == "pass"
    assert comp.checks[0].ci is not None and comp.checks[0].ci.low < 0 < comp.checks[0].ci.high


def test_improvement_is_reported_not_failed(make_run: Callable[..., Path], tmp_path: Path) -> None:
    text = PUBLISHED.read_text().replace("[98.2, 96.3, 89.9]", "[80.0, 70.0, 60.0]")
    (tmp_path / "stale.yaml").write_text(text)
    comp = compare(load_run(make_run({"ascend/NONE/stock": [GOOD]})), load_baseline(tmp_path / "stale.yaml"))
    assert comp.exit_code == ExitCode.OK
    assert "improvement" in kinds(comp, "info")


def test_graph_divergence_against_eager_reference(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run(
            {"ascend/NONE/stock": [[94.8, 94.8, 94.8]], "ascend/FULL_DECODE_ONLY/stock": [[5.3, 2.0, 1.0]]},
            requested={"NONE": {"cudagraph_mode": "NONE"}, "FULL_DECODE_ONLY": {"cudagraph_mode": "FULL_DECODE_ONLY"}},
        )
    )
    comp = analyze(run)
    div = [d for d in comp.diagnoses if d.kind == "graph-divergence"]
    assert len(div) == 1 and div[0].cell == "ascend/FULL_DECODE_ONLY/stock"
    assert div[0].numbers["reference"] == "ascend/NONE/stock"
    assert div[0].numbers["same_text"] is True
    assert "per-layer draft attention metadata" in div[0].cause
    assert comp.exit_code == ExitCode.REGRESSION


def test_fixed_variant_compares_against_the_same_baseline_and_passes(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run(
            {
                "ascend/FULL_DECODE_ONLY/stock": [BROKEN_A, BROKEN_B],
                "ascend/FULL_DECODE_ONLY/fixed": [GOOD, GOOD],
            }
        )
    )
    comp = compare(run, load_baseline(PUBLISHED))
    by_cell = {d.cell for d in comp.diagnoses if d.severity == "fail"}
    assert by_cell == {"ascend/FULL_DECODE_ONLY/stock"}
    fixed = [c for c in comp.checks if c.cell.endswith("/fixed")]
    assert [c.base_rate for c in fixed] == pytest.approx([0.982, 0.963, 0.899])
    assert {c.verdict for c in fixed} == {"pass"}


def test_downgraded_graph_mode_is_warned(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run(
            {"cpu/FULL_DECODE_ONLY/stock": [GOOD]},
            requested={"FULL_DECODE_ONLY": {"cudagraph_mode": "FULL_DECODE_ONLY"}},
            effective={"FULL_DECODE_ONLY": {"cudagraph_mode": "NONE", "device_type": "cpu"}},
        )
    )
    comp = analyze(run)
    warn = [d for d in comp.diagnoses if d.kind == "graph-mode-downgraded"]
    assert warn and "FULL_DECODE_ONLY ran as NONE on cpu" in warn[0].message
    assert comp.exit_code == ExitCode.OK


def test_text_change_under_greedy_is_named(make_run: Callable[..., Path]) -> None:
    run = load_run(make_run({"cpu/eager/stock": [GOOD, GOOD]}, text={"cpu/eager/stock": ["x", "y"]}))
    comp = analyze(run)
    assert "text-changed" in kinds(comp, "warn")


@pytest.mark.parametrize(
    ("kw", "needle"),
    [({"k": 4}, "k=4 vs baseline k=3"), ({"method": "eagle"}, "method eagle"), ({"temperature": 0.7}, "temperature")],
)
def test_not_comparable_is_its_own_exit_code(make_run: Callable[..., Path], kw: dict, needle: str) -> None:
    rates = [90.0] * kw.get("k", 3)
    run = load_run(make_run({"ascend/NONE/stock": [rates]}, **kw))
    with pytest.raises(NotComparableError, match=needle) as exc:
        compare(run, load_baseline(PUBLISHED))
    assert exc.value.exit_code == ExitCode.NOT_COMPARABLE


def test_failed_cell_gives_exit_3_when_nothing_else_fails(make_run: Callable[..., Path]) -> None:
    run = load_run(make_run({"ascend/NONE/stock": [GOOD, GOOD]}, statuses={"ascend/NONE/stock": ["ok", "failed"]}))
    comp = compare(run, load_baseline(PUBLISHED))
    assert comp.exit_code == ExitCode.RUN_FAILED
    assert "run-failed" in kinds(comp, "warn")
