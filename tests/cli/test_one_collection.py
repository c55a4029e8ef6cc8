"""Issue 27, "one pass through compare": every command collects a run's evidence exactly once. Before, one
`mtpbench run` collected it two or three times (the verdict, the history refresh, the serving summary) and
`compare` of a serving run twice (the verdict and the serving table). Every module that binds
`collect_evidence` gets the same counting wrapper, so a second collection through any of them is counted."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mtpbench.judge import evidence as ev
from mtpbench.judge.history import POINT_CACHE
from mtpbench.run.cells import RunOutcome
from mtpbench.store.manifest import MANIFEST
from tests.support.cli import invoke
from tests.support.synthetic_runs import PUBLISHED

REPO = Path(__file__).resolve().parents[2]
GOOD = [98.2, 96.3, 89.9]
SERVING_RUN = REPO / "tests" / "data" / "runs" / "counters-only-serving"
SERVING_BASELINE = REPO / "baselines" / "tiny-gemma4-mtp-serving-cpu.yaml"


@pytest.fixture
def collections(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """The run folders evidence was collected from, one entry per collection."""
    original = ev.collect_evidence
    seen: list[Path] = []

    def counting(run: Any, *args: Any, **kwargs: Any) -> ev.Evidence:
        seen.append(run.path)
        return original(run, *args, **kwargs)

    import mtpbench.cli
    import mtpbench.judge.compare
    import mtpbench.judge.history
    import mtpbench.judge.save  # noqa: F401

    for name, module in list(sys.modules.items()):
        if name.startswith("mtpbench.") and getattr(module, "collect_evidence", None) is original:
            monkeypatch.setattr(module, "collect_evidence", counting)
    yield seen


def _fresh(run: Path) -> Path:
    (run / POINT_CACHE).unlink(missing_ok=True)
    return run


def test_compare_collects_once(make_run: Callable[..., Path], collections: list[Path]) -> None:
    run = make_run({"a/NONE/stock": [GOOD, GOOD]})
    assert invoke("compare", run, "--baseline", PUBLISHED).exit_code == 0
    assert collections == [run]


def test_show_collects_once(make_run: Callable[..., Path], collections: list[Path]) -> None:
    run = make_run({"a/NONE/stock": [GOOD]})
    assert invoke("show", run).exit_code == 0
    assert collections == [run]


def test_compare_of_a_serving_run_collects_once(tmp_path: Path, collections: list[Path]) -> None:
    # The serving table and the serving findings read the same evidence as the verdict.
    run = tmp_path / "run"
    shutil.copytree(SERVING_RUN, run)
    res = invoke("compare", run, "--baseline", SERVING_BASELINE)
    assert res.exit_code == 1, res.output
    assert "requests" in res.output  # the serving table was printed
    assert collections == [run]


def test_compare_of_a_replayed_run_collects_once(make_run: Callable[..., Path], collections: list[Path]) -> None:
    # The stored reference (issue 29) is held against the same evidence the gate judged, not a second collection.
    from tests.support.reference_runs import write_reference

    run = make_run({"a/NONE/stock": [GOOD]})
    write_reference(run, ["a/NONE/stock"])
    res = invoke("compare", run, "--baseline", PUBLISHED, "--json")
    assert "reference" in json.loads(res.stdout)
    assert collections == [run]


def test_report_collects_once(make_run: Callable[..., Path], tmp_path: Path, collections: list[Path]) -> None:
    pytest.importorskip("matplotlib")
    run = make_run({"a/NONE/stock": [GOOD]})
    res = invoke("report", run, "--baseline", PUBLISHED, "--html", tmp_path / "r.html")
    assert res.exit_code == 0, res.output
    assert collections == [run]


def test_history_collects_once_per_run_then_reads_its_cache(
    make_run: Callable[..., Path], collections: list[Path]
) -> None:
    run = _fresh(make_run({"a/NONE/stock": [GOOD]}))
    assert invoke("history", run).exit_code == 0
    assert collections == [run]
    assert invoke("history", run).exit_code == 0
    assert collections == [run]  # the history point was cached: nothing collected again


@pytest.mark.parametrize("compare_with", [None, PUBLISHED], ids=["no-compare", "baseline"])
def test_run_collects_once_for_history_verdict_and_summary(
    make_run: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    collections: list[Path],
    compare_with: Path | None,
) -> None:
    # The runner is replaced by one that "runs" by writing a finished run: what is counted is the end of
    # `run` (the history point, the time spent, the verdict), which used to collect the evidence again each.
    from mtpbench.run import runner

    written = _fresh(make_run({"a/NONE/stock": [GOOD, GOOD]}))

    def execute(*args: Any, **kwargs: Any) -> RunOutcome:
        import json

        return RunOutcome(written, json.loads((written / MANIFEST).read_text()))

    monkeypatch.setattr(runner, "execute", execute)
    options = ["--no-compare"] if compare_with is None else ["--baseline", compare_with]
    res = invoke("run", REPO / "configs" / "tiny-gemma4-mtp.yaml", "--out", tmp_path / "runs", *options)
    assert res.exit_code == 0, res.output
    assert collections == [written]
    assert (written / POINT_CACHE).is_file()  # the history point was written from that one collection
