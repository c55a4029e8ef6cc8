"""The store's RunWriter: a run written through it is a run in the runner's format (the reader takes it, its
lines are the worker's lines, its statuses are the enums' values), the one writer tests/support/synthetic_runs.py
and the benchmarks use instead of JSON of their own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtpbench.engine.worker import append_record
from mtpbench.errors import UserError
from mtpbench.schema import SCHEMA_VERSION, CellStatus, RunStatus
from mtpbench.store import MANIFEST, RECORDS, RunWriter, load_run, read_manifest

CONFIG = {
    "name": "written",
    "model": "m",
    "speculative": {"method": "mtp", "model": "d", "num_speculative_tokens": 2},
    "sampling": {"temperature": 0.0},
}
PROMPTS = {"name": "p", "sha256": "ab" * 32, "ids": ["a", "b"]}


def _counts(drafts: int, accepted: list[int]) -> dict[str, object]:
    return {
        "num_drafts": drafts,
        "num_draft_tokens": 2 * drafts,
        "num_accepted_tokens": sum(accepted),
        "accepted_per_pos": accepted,
    }


def _written(root: Path) -> RunWriter:
    run = RunWriter.create(root / "20261205T000000Z-written", config=CONFIG, config_path="w.yaml", prompts=PROMPTS)
    i = run.add_cell(build="b", mode="eager", variant="stock", repeat=0, hash_seed=7, status=CellStatus.OK)
    records = (
        run.record(i, "prompt", prompt_id=pid, prompt_index=j, **_counts(10, [8, 5]), output_sha256=f"s-{pid}")
        for j, pid in enumerate(PROMPTS["ids"])
    )
    assert run.append([run.record(i, "cell_start", requested={}, effective={}, patches=[])]) == 1
    assert run.append(records) == 2  # a generator is written as it is drawn
    run.finish(RunStatus.COMPLETE)
    return run


def test_a_written_run_is_read_back_whole(tmp_path: Path) -> None:
    run = _written(tmp_path)
    loaded = load_run(run.path)
    assert loaded.run_id == run.path.name == run.run_id
    assert loaded.typed.status is RunStatus.COMPLETE
    (cell,) = loaded.typed.cells
    assert (cell.cell, cell.status, cell.hash_seed) == ("b/eager/stock", CellStatus.OK, 7)
    frame = loaded.prompt_frame()
    assert list(frame["prompt_id"]) == ["a", "b"] and int(frame["num_drafts"].sum()) == 20
    assert [r["type"] for r in loaded.cell_starts()] == ["cell_start"]


def test_statuses_are_written_as_their_values(tmp_path: Path) -> None:
    manifest = json.loads((_written(tmp_path).path / MANIFEST).read_text())
    assert manifest["status"] == "complete" and manifest["finished"]
    assert manifest["cells"][0]["status"] == "ok"
    assert str(CellStatus.TIMEOUT) == f"{CellStatus.TIMEOUT}" == "timeout"  # never "CellStatus.TIMEOUT"
    assert f"{RunStatus.INTERRUPTED}" == "interrupted"


def test_a_record_line_is_the_workers_line(tmp_path: Path) -> None:
    run = _written(tmp_path)
    ours = (run.path / RECORDS).read_text().splitlines()
    theirs = tmp_path / "worker.jsonl"
    for line in ours:
        append_record(str(theirs), json.loads(line))
    assert theirs.read_text().splitlines() == ours
    first = json.loads(ours[0])
    assert list(first)[:9] == ["schema", "run_id", "cell", "build", "mode", "variant", "repeat", "hash_seed", "type"]
    assert first["schema"] == SCHEMA_VERSION and first["run_id"] == run.run_id


def test_in_new_folder_claims_a_fresh_folder_as_the_runner_does(tmp_path: Path) -> None:
    one = RunWriter.in_new_folder(tmp_path, config=CONFIG, config_path="w.yaml", prompts=PROMPTS)
    two = RunWriter.in_new_folder(tmp_path, config=CONFIG, config_path="w.yaml", prompts=PROMPTS)
    assert one.path != two.path and one.path.name.endswith("-written")
    assert (one.path / "logs").is_dir() and (one.path / RECORDS).read_bytes() == b""
    assert one.manifest["status"] is RunStatus.RUNNING and one.manifest["finished"] is None


def test_update_cell_saves_the_manifest_at_once(tmp_path: Path) -> None:
    run = RunWriter.create(tmp_path / "r", config=CONFIG, config_path="w.yaml", prompts=PROMPTS)
    i = run.add_cell(build="b", mode="m", variant="v", repeat=0, hash_seed=0)
    run.update_cell(i, status=CellStatus.RUNNING, pid=123)
    raw, typed = read_manifest(run.path / MANIFEST)
    assert raw["cells"][0]["pid"] == 123 and typed.cells[0].status is CellStatus.RUNNING


def test_a_run_status_that_is_not_a_run_status_is_refused(tmp_path: Path) -> None:
    # Issue 27: the gate-power benchmark once wrote "finished", a status the runner never writes.
    run = _written(tmp_path)
    manifest = json.loads((run.path / MANIFEST).read_text())
    (run.path / MANIFEST).write_text(json.dumps({**manifest, "status": "finished"}))
    with pytest.raises(UserError, match=r"manifest key status: "):
        read_manifest(run.path / MANIFEST)


def test_create_refuses_a_folder_that_exists(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    with pytest.raises(FileExistsError):
        RunWriter.create(tmp_path / "r", config=CONFIG, config_path="w.yaml", prompts=PROMPTS)
