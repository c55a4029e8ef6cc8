"""Issue 19 item 7: the last paths to a green exit on no evidence, each through the CLI. Each of these
passed before: a manifest of zero cells (`PASS: 0 cells`), a records file appended to itself, records of
another run inside a run folder, and a baseline saved from a cell that recorded zero drafts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from mtpbench.store.manifest import MANIFEST
from mtpbench.store.records import RECORDS
from tests.support.cli import invoke
from tests.support.synthetic_runs import PUBLISHED

GOOD = [98.2, 96.3, 89.9]


def _fresh(run: Path) -> None:
    """Drop the derived caches so the next load reads the JSONL we edited."""
    for f in run.glob("*.parquet"):
        f.unlink()


def test_a_run_of_zero_cells_is_bad_input_not_a_pass(make_run: Callable[..., Path]) -> None:
    run = make_run({"b/NONE/stock": [GOOD]})
    m = json.loads((run / MANIFEST).read_text())
    m["cells"] = []
    (run / MANIFEST).write_text(json.dumps(m))
    for cmd in (("compare", run, "--baseline", PUBLISHED), ("show", run)):
        res = invoke(*cmd)
        assert res.exit_code == 2, res.output
        assert "cells" in res.output and "PASS" not in res.output


def test_a_records_file_appended_to_itself_is_refused(make_run: Callable[..., Path]) -> None:
    run = make_run({"b/NONE/stock": [GOOD]})
    text = (run / RECORDS).read_text()
    (run / RECORDS).write_text(text + text)
    _fresh(run)
    res = invoke("compare", run, "--baseline", PUBLISHED)
    assert res.exit_code == 2, res.output
    assert "recorded again" in res.output and "PASS" not in res.output


def test_records_of_another_run_are_refused(make_run: Callable[..., Path]) -> None:
    run = make_run({"b/NONE/stock": [GOOD]})
    recs = [json.loads(x) for x in (run / RECORDS).read_text().splitlines()]
    recs[-1]["run_id"] = "someone-elses-run"
    (run / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    _fresh(run)
    res = invoke("compare", run, "--baseline", PUBLISHED)
    assert res.exit_code == 2, res.output
    assert "someone-elses-run" in res.output


def test_baseline_save_refuses_a_cell_without_drafts(make_run: Callable[..., Path], tmp_path: Path) -> None:
    run = make_run({"b/NONE/stock": [GOOD], "b/FULL/stock": [GOOD]})
    recs = [json.loads(x) for x in (run / RECORDS).read_text().splitlines()]
    for r in recs:
        if r.get("type") == "prompt" and r["cell"] == "b/FULL/stock":
            r.update(num_drafts=0, num_draft_tokens=0, num_accepted_tokens=0, accepted_per_pos=[0, 0, 0])
    (run / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    _fresh(run)
    out = tmp_path / "b.yaml"
    res = invoke("baseline", "save", run, "--out", out)
    assert res.exit_code == 2, res.output
    assert "zero drafts" in res.output and not out.exists()
