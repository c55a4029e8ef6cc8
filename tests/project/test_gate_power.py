"""benchmarks/gate_power.py, the Monte-Carlo of the gate's rule under bursty prompt-level noise: its noise
model keeps what it promises (prefix property, the truth's rates, the drop it is asked for, burstiness that
widens the spread) and its `--quick` mode runs end to end through the real judging path. The goals the rule
is built to meet (≤ 1 % harmless failures, ≥ 90 % power at δ) are the report's to show, not asserted here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gate_power.py"


@pytest.fixture(scope="module")
def gp() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gate_power", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gate_power"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def pooled(drafts: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """Per draw, the pooled per-position rate: (reps, K)."""
    return acc.sum(axis=1) / drafts.sum(axis=1)[:, None]


def test_truths_are_the_stored_baseline_and_a_gemma4_like_set(gp: ModuleType) -> None:
    # The shipped default's baseline (configs/tiny-gemma4-mtp.yaml: HumanEval's 150 short prompts).
    tiny = gp.truth_for("tiny", 150).describe()
    assert (tiny["prompts"], tiny["drafts"]) == (150, 4979)
    assert tiny["pooled_pct"] == pytest.approx([98.393, 95.22, 92.609], abs=0.01)
    gemma = gp.truth_for("gemma4-like", 40).describe()
    assert gemma["prompts"] == 40 and gemma["drafts_per_prompt"][0] >= 30 and gemma["drafts_per_prompt"][1] <= 240
    assert gemma["pooled_pct"] == pytest.approx([98, 96, 90], abs=0.05)
    assert len(gp.truth_for("tiny", 5).ids) == 5 and len(set(gp.truth_for("tiny", 160).ids)) == 160


def test_draws_keep_the_prefix_property_and_the_truths_rates(gp: ModuleType) -> None:
    t = gp.truth_for("gemma4-like", 40)
    drafts, acc = gp.simulate(t, np.ones(gp.K), gp.BURSTS["independent"], 400, np.random.default_rng(0))
    assert (np.diff(acc, axis=-1) <= 0).all() and (acc[..., 0] <= drafts).all()
    assert pooled(drafts, acc).mean(axis=0) == pytest.approx(t.pooled(), abs=0.002)


def test_a_drop_lowers_its_position_by_the_points_asked(gp: ModuleType) -> None:
    t, b = gp.truth_for("tiny", 40), gp.BURSTS["bursty"]
    same = pooled(*gp.simulate(t, np.ones(gp.K), b, 600, np.random.default_rng(1))).mean(axis=0)
    dropped = pooled(*gp.simulate(t, gp.drop_scale(t, 2, 5.0), b, 600, np.random.default_rng(2))).mean(axis=0)
    assert 100 * (same - dropped) == pytest.approx([0, 0, 5.0], abs=0.5)


def test_burstier_drafts_spread_a_harmless_change_more(gp: ModuleType) -> None:
    t = gp.truth_for("tiny", 40)
    sd = {
        name: pooled(*gp.simulate(t, np.ones(gp.K), gp.BURSTS[name], 300, np.random.default_rng(3))).std(axis=0)
        for name in ("independent", "bursty", "very-bursty")
    }
    assert (sd["independent"] < sd["bursty"]).all() and (sd["bursty"] < sd["very-bursty"]).all()


def test_a_run_identical_to_its_baseline_passes_through_compare(gp: ModuleType, tmp_path: Path) -> None:
    """Both cells and the baseline are the same draw: Δ is 0 at every check and the cells agree."""
    from mtpbench.judge.save import baseline_of_run
    from mtpbench.store.results import load_run

    t = gp.truth_for("tiny", 40)
    drafts, acc = gp.simulate(t, np.ones(gp.K), gp.BURSTS["bursty"], 1, np.random.default_rng(4))
    cells = {c: (drafts[0], acc[0]) for c in gp.CELLS}
    base = baseline_of_run(load_run(gp.write_run(tmp_path / "b", t, cells, "")), "gate-power-baseline")
    out = gp.judge(gp.write_run(tmp_path / "r", t, cells, "gate-power-baseline.yaml"), base)
    assert (out.exit_code, out.kinds) == (0, [])


def test_its_runs_are_written_by_the_store_with_the_runners_statuses(gp: ModuleType, tmp_path: Path) -> None:
    # Issue 27: this writer was one of three hand-made ones and said "finished", a status the runner never writes.
    from mtpbench.schema import CellStatus, RunStatus
    from mtpbench.store.manifest import read_manifest

    t = gp.truth_for("tiny", 5)
    drafts, acc = gp.simulate(t, np.ones(gp.K), gp.BURSTS["bursty"], 1, np.random.default_rng(5))
    run = gp.write_run(tmp_path / "r", t, {c: (drafts[0], acc[0]) for c in gp.CELLS}, "")
    raw, typed = read_manifest(run / "manifest.json")
    assert raw["status"] == "complete" and typed.status is RunStatus.COMPLETE and raw["finished"]
    assert [c.status for c in typed.cells] == [CellStatus.OK] * len(gp.CELLS)


def test_quick_mode_runs_end_to_end_and_catches_a_20_point_drop(gp: ModuleType, tmp_path: Path) -> None:
    md, js = tmp_path / "report.md", tmp_path / "report.json"
    assert gp.main(["--quick", "--md", str(md), "--json", str(js)]) == 0
    data = json.loads(js.read_text())
    (res,) = data["results"]
    sc = res["scenarios"]
    assert data["gate_drop_pts"] > 0 and {"harmless", "harmless+shift", "identical"} <= set(sc)
    for pos in range(gp.K):
        big = sc[f"drop 20 pts pos{pos}, 1 cell"]
        assert big["n"] == 30 and big["exit1"]["rate"] >= 0.9, big["exit_codes"]
    for v in sc.values():
        lo, hi = v["any_nonzero"]["ci95"]
        assert lo - 1e-9 <= v["any_nonzero"]["rate"] <= hi + 1e-9 and sum(v["exit_codes"].values()) == v["n"]
    text = md.read_text()
    assert "python benchmarks/gate_power.py --quick" in text and "## Summary" in text and "Wilson" in text


def test_an_al_drop_lowers_the_acceptance_length_by_the_percent_asked(gp: ModuleType) -> None:
    # The scenario the default gate's power is measured on: AL (1 + accepted tokens per draft) falls by 5 %.
    t, b = gp.truth_for("tiny", 40), gp.BURSTS["bursty"]

    def al(draw: tuple[np.ndarray, np.ndarray]) -> float:
        drafts, acc = draw
        return float(1 + (acc.sum(axis=(1, 2)) / drafts.sum(axis=1)).mean())

    same = al(gp.simulate(t, np.ones(gp.K), b, 600, np.random.default_rng(3)))
    dropped = al(gp.simulate(t, gp.al_scale(t, 5.0), b, 600, np.random.default_rng(4)))
    assert 100 * (1 - dropped / same) == pytest.approx(5.0, abs=0.5)
