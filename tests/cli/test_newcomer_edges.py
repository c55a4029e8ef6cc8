"""The newcomer's edges of issue 30, each pinned where it was wrong: a baseline saved from the run it judges
warns that it certifies nothing; `show` of a run whose config names a baseline says so instead of "no
baseline given"; the selftest labels its expected FAIL lines as expected; `--executor ray` without Ray is
one line and exit 2 before any run folder or progress bar; the run's summary does not sum the wait for a
device past the wall time. (A dry run of a config that cannot start exits 2: tests/cli/test_prompt_sets.py.)"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import invoke, one_error_line
from tests.support.synthetic_runs import PUBLISHED

REPO = Path(__file__).resolve().parents[2]
GOOD = [98.2, 96.3, 89.9]


def test_a_baseline_saved_from_the_same_run_warns_that_it_certifies_nothing(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    run = make_run({"cpu/eager/stock": [GOOD, GOOD]}, baseline=None)
    own = tmp_path / "own.yaml"
    assert invoke("baseline", "save", run, "--out", own).exit_code == 0
    res = invoke("compare", run, "--baseline", own, "--accept-unchecked")
    assert res.exit_code == 0, res.output  # a warning: the verdict stands, the reader is told what it is worth
    assert f"WARN baseline-from-this-run *: the baseline {own} was saved from this same run" in res.stdout
    assert "the cells it was saved from agree with it by construction, so their comparison certifies nothing" in (
        res.stdout.replace("\n", " ")
    )
    # The same numbers saved from another run (its provenance names that run): an ordinary comparison.
    other = tmp_path / "other.yaml"
    other.write_text(own.read_text().replace("20261202T000000Z-synthetic", "20261201T000000Z-synthetic"))
    res = invoke("compare", run, "--baseline", other, "--accept-unchecked")
    assert res.exit_code == 0, res.output
    assert "baseline-from-this-run" not in res.stdout


def test_show_of_a_run_whose_config_names_a_baseline_says_so(make_run: Callable[..., Path]) -> None:
    named = invoke("show", make_run({"cpu/eager/stock": [GOOD, GOOD]}))  # the config names the published one
    assert "no baseline given" not in named.stdout
    assert f"not compared with the baseline the run's config names ({PUBLISHED})" in named.stdout
    assert f" --baseline {PUBLISHED}`" in named.stdout  # the command itself: tests/cli/test_verdict_words.py


def test_show_of_a_run_without_a_baseline_still_says_none_was_given(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    res = invoke("show", make_run({"cpu/eager/stock": [GOOD, GOOD]}, baseline=None))
    assert "no baseline given, so no drop is ruled out" in res.stdout


def test_selftest_labels_its_expected_fail_lines(
    make_run: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import mtpbench.cli.selftest as st
    from mtpbench.judge.compare import judge
    from mtpbench.store.baseline import load_baseline
    from mtpbench.store.results import load_run

    run = make_run({"cpu/eager/stock": [GOOD, GOOD], "cpu/eager/fault": [[76.2, 61.0, 50.2], [39.2, 14.4, 10.1]]})
    any_mode = run.parent / "any-mode.yaml"
    any_mode.write_text(PUBLISHED.read_text().replace("mode: NONE", 'mode: "*"'))
    comp = judge(load_run(run), load_baseline(any_mode), accept_unchecked=True)
    monkeypatch.setattr(st, "_localised", lambda comp, stock, fault, lines: True)
    ok, lines = st.evaluate(comp)
    monkeypatch.setattr(
        st, "run_selftest", lambda out, make_view=None, methods=None: st.SelftestResult(comp, ok, lines)
    )
    res = invoke("selftest")
    assert res.exit_code == 0, res.output
    fails = [x for x in res.stdout.splitlines() if x.startswith("FAIL ")]
    assert fails, res.stdout  # the fault's regression and instability
    assert all(x.startswith("FAIL (expected: the injected fault must fail) ") for x in fails), fails
    verdict = next(x for x in res.stdout.splitlines() if "(exit 1)" in x)
    assert verdict.startswith("(expected: the injected fault must fail) FAIL: "), verdict


def test_executor_ray_without_ray_is_one_line_before_any_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without Ray installed
    out = tmp_path / "runs"
    res = invoke("run", REPO / "configs" / "tiny-gemma4-mtp.yaml", "--executor", "ray", "--out", out)
    assert res.exit_code == 2, res.output
    assert "--executor ray needs Ray" in one_error_line(res)
    assert not out.exists()  # refused before the run folder (and the progress bars drawn over it)


def test_the_wait_for_a_device_never_sums_past_the_wall_time() -> None:
    from mtpbench.render.words.runtime import time_text
    from mtpbench.run.cost import time_breakdown

    # Six cell-repeats on two device slots, each 10 s: they started 0, 0, 10, 10, 20 and 20 s into a 30-s run.
    cells = [
        {"wall_s": 10.0, "startup_s": 4.0, "generation_s": 5.0, "engine_start_s": 3.0, "queued_s": q}
        for q in (0.0, 0.0, 10.0, 10.0, 20.0, 20.0)
    ]
    t = time_breakdown({"cells": cells, "sessions": [{"wall_s": 30.0, "jobs": 2}]})
    line = time_text("runs/x", t)
    assert "queued 60.0 s" not in line and "summed over cell-repeats" not in line  # the old sum: 0+0+10+10+20+20 s
    assert "waiting for a device from the run's start: at most 20.0 s, 10.0 s on average per cell-repeat" in line
    assert t["queued_max_s"] <= t["run_wall_s"]
    assert "+ exit 6.0 s" in line and "2 device slots busy 100 %" in line


def test_a_sequential_run_summary_does_not_read_like_a_device_shortage() -> None:
    # Issue 37 item 18: one job at a time, each cell-repeat "waited for a device" as long as the ones before
    # it ran, and the slot read "busy 100 %": words of a shortage for a run that simply ran in turn.
    from mtpbench.render.words.runtime import time_text
    from mtpbench.run.cost import time_breakdown

    cells = [
        {"wall_s": 10.0, "startup_s": 4.0, "generation_s": 5.0, "engine_start_s": 3.0, "queued_s": q}
        for q in (0.0, 10.0, 20.0, 30.0)
    ]
    line = time_text("runs/x", time_breakdown({"cells": cells, "sessions": [{"wall_s": 40.0, "jobs": 1}]}))
    assert "waiting for a device" not in line and "device slots busy" not in line
    assert "one cell-repeat at a time (jobs 1), in workers 100 % of the wall time" in line


def _with_role(run: Path, role: str) -> Path:
    # The role as the runner stores it in the manifest's config (write_run's configs predate issue 30).
    manifest = run / "manifest.json"
    data = json.loads(manifest.read_text())
    data["config"]["role"] = role
    manifest.write_text(json.dumps(data))
    return run


def test_a_reproductions_inconclusive_verdict_says_it_is_expected(make_run: Callable[..., Path]) -> None:
    # Five prompts of few drafts near the published rates: too little evidence to certify δ (exit 5).
    cells = {"cpu/NONE/stock": [[97.0, 95.0, 88.0]] * 3}
    res = invoke("compare", _with_role(make_run(cells, drafts=20), "reproduction"), "--baseline", PUBLISHED)
    assert res.exit_code == 5, res.output
    assert "this config is a reproduction (role: reproduction)" in res.stdout
    assert "a healthy build is expected to be inconclusive (exit 5) here, not green" in res.stdout
    gate = invoke("compare", _with_role(make_run(cells, drafts=20), "gate"), "--baseline", PUBLISHED)
    assert gate.exit_code == 5 and "role: reproduction" not in gate.stdout  # a gate's inconclusive is a finding


def test_dry_runs_of_the_gemma4_configs_say_what_their_verdict_means() -> None:
    for plat in ("ascend", "cuda"):
        repro = invoke("run", REPO / "configs" / f"gemma4-mtp-{plat}.yaml", "--dry-run")
        assert repro.exit_code == 0, repro.output
        assert "the config's 5 prompts are too few" in repro.stdout
        assert "this config is a reproduction (role: reproduction)" in repro.stdout
        gate = invoke("run", REPO / "configs" / f"gemma4-mtp-{plat}-gate.yaml", "--dry-run")
        assert gate.exit_code == 0, gate.output
        assert "sizing: no baseline yet" in gate.stdout
        assert "the config's 150 prompts certify δ on a healthy build" in gate.stdout
        assert "role: reproduction" not in gate.stdout
