"""Issue 19 item 3: sizing says how many prompts certify δ, from a baseline's per-prompt spread (an upper
bound) or a pilot run's paired spread, in `mtpbench size` and `run --dry-run`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mtpbench.cli import app
from mtpbench.judge.sizing import family_of_config, prompts_for, size_entry
from mtpbench.judge.stats import detectable_drop
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import load_baseline

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "baselines" / "tiny-gemma4-mtp-cpu.yaml"


def test_prompts_for_is_the_smallest_count_whose_detectable_drop_reaches_delta() -> None:
    se, g, drop, alpha, power = 0.02, 40, 0.05, 0.01 / 6, 0.9
    n = prompts_for(se, g, drop, alpha, power)
    at = detectable_drop(se * math.sqrt(g / n), n - 1, alpha, power)
    assert at is not None and at <= drop
    # A few prompts fewer would not do (the search steps by at most n/8).
    fewer = n - max(1, n // 8)
    assert (detectable_drop(se * math.sqrt(g / fewer), fewer - 1, alpha, power) or 1.0) > drop
    assert prompts_for(0.0, 40, drop, alpha, power) == 40  # no spread: what is there certifies


def test_family_counts_baseline_and_divergence_checks() -> None:
    # AL + k positions per cell against the baseline, k per graph cell against its eager reference.
    cells = [("b", "eager", "stock"), ("b", "compiled", "stock"), ("b", "eager", "stock")]
    assert family_of_config(3, cells, "eager") == (3 + 1) * 2 + 3
    assert family_of_config(3, cells, None) == (3 + 1) * 2


def test_the_shipped_baseline_is_sized_for_acceptance_length_and_per_position() -> None:
    (s, _) = [size_entry(e, GateSpec(), 11, 2) for e in load_baseline(TINY).entries]
    assert s is not None and s.prompts == 40 and [p.pos for p in s.positions] == [-1, 0, 1, 2]
    al, *pos = s.positions
    assert al.primary and not any(p.primary for p in pos) and s.prompts_needed == al.prompts_needed
    assert al.drop == pytest.approx(0.05 * (1 + sum(load_baseline(TINY).entries[0].rates_pct) / 100), rel=0.01)
    # Later positions vary more between prompts: they need more prompts.
    need = [p.prompts_needed for p in pos]
    assert all(n is not None for n in need) and need[0] < need[1] < need[2]  # type: ignore[operator]
    # The primary endpoint is also held to certifying δ on a harmless run: it never needs fewer prompts than
    # the power alone asks.
    assert al.se is not None and al.prompts_needed is not None
    alone = prompts_for(al.se, 40, al.drop, s.split.primary, 0.9)
    assert al.prompts_needed >= alone
    # Under the positions gate the positions are primary and the sizing is theirs.
    (p2, _) = [size_entry(e, GateSpec(primary="positions"), 9, 6) for e in load_baseline(TINY).entries]
    assert p2 is not None and p2.prompts_needed == max(p.prompts_needed or 0 for p in p2.positions if p.pos >= 0)


def test_size_command_and_dry_run_show_the_sizing() -> None:
    res = CliRunner().invoke(app, ["size", str(TINY)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "prompts needed" in res.stdout and "current/eager" in res.stdout and "upper bound" in res.stdout
    dry = CliRunner().invoke(
        app, ["run", str(ROOT / "configs" / "tiny-gemma4-mtp.yaml"), "--dry-run"], env={"COLUMNS": "200"}
    )
    assert dry.exit_code == 0, dry.output
    assert "sizing: to certify no drop ≥ 5 % in acceptance length" in dry.stdout and "over 11 checks" in dry.stdout
    assert "AL (primary)" in dry.stdout and "pos2 (diagnosis)" in dry.stdout


def test_size_refuses_a_tolerance_that_is_not_a_finite_number() -> None:
    for bad in ("inf", "nan", "-1"):
        res = CliRunner().invoke(app, ["size", str(TINY), "--tolerance", bad], env={"COLUMNS": "200"})
        assert res.exit_code == 2 and "Traceback" not in res.output and "internal error" not in res.output, res.output
