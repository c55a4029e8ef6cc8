"""Run storage under crashes, full disks and concurrency: the records reader, the worker's appender, run
folders and the manifest writer (no engine)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mtpbench.engine import records, worker
from mtpbench.errors import DataWarning, ExitCode, StorageError, UserError
from mtpbench.schema import SCHEMA_VERSION
from mtpbench.specs import DEFAULT_TOLERANCE_PTS
from mtpbench.store import manifest as manifest_module
from mtpbench.store.manifest import MANIFEST, new_run_dir, write_json_atomic
from mtpbench.store.records import RECORDS, scan_records
from mtpbench.store.results import load_run, refresh_copy

GOOD_RATES = [98.2, 96.3, 89.9]


def prompt_record(i: int, **over: Any) -> dict[str, Any]:
    rec = {
        "schema": SCHEMA_VERSION,
        "run_id": "r",
        "cell": "cpu/eager/stock",
        "build": "cpu",
        "mode": "eager",
        "variant": "stock",
        "repeat": 0,
        "hash_seed": 0,
        "type": "prompt",
        "prompt_id": f"p{i}",
        "prompt_index": i,
        "num_drafts": 10,
        "num_draft_tokens": 30,
        "num_accepted_tokens": 24,
        "accepted_per_pos": [9, 8, 7],
        "output_sha256": "ab" * 32,
        "wall_s": 0.1,
    }
    return {**rec, **over}


# --- torn lines ------------------------------------------------------------------------------------------


def test_truncated_last_line_is_reported_and_ignored(make_run: Callable[..., Path]) -> None:
    # Regression: a crash mid-write used to make the whole run unreadable (exit 2).
    run = make_run({"cpu/eager/stock": [GOOD_RATES]})
    rec = run / RECORDS
    lines = rec.read_bytes().splitlines(keepends=True)
    rec.write_bytes(b"".join(lines) + lines[-1][:-40])
    with pytest.warns(DataWarning, match=rf"records.jsonl:{len(lines) + 1}: ignored a line cut off by a crash"):
        loaded = load_run(run)
    assert len(loaded.records) == len(lines)
    assert loaded.warnings and "cut off" in loaded.warnings[0]


def test_append_after_a_torn_line_starts_a_new_line_and_the_run_stays_readable(tmp_path: Path) -> None:
    path = tmp_path / RECORDS
    records.append_record(str(path), prompt_record(0))
    full = json.dumps(prompt_record(1))
    with path.open("a") as f:
        f.write(full[:50])  # what a worker killed mid-write leaves
    records.append_record(str(path), prompt_record(2))
    lines = path.read_text().splitlines()
    assert lines[1] == full[:50]
    assert json.loads(lines[2]) == {"schema": SCHEMA_VERSION, "type": "torn", "bytes": 50}
    assert json.loads(lines[3])["prompt_id"] == "p2"
    got = scan_records(path, 3)
    assert [r["prompt_id"] for r in got.records] == ["p0", "p2"]
    assert got.warnings == [f"{path}:2: ignored a line cut off by a crash (50 bytes)"]


def test_garbage_in_the_middle_is_exit_2_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / RECORDS
    garbage = '{"type": "prompt", "sch\n'
    path.write_text(json.dumps(prompt_record(0)) + "\n" + garbage + json.dumps(prompt_record(1)) + "\n")
    with pytest.raises(UserError, match=r"records.jsonl:2: corrupt JSON") as exc:
        scan_records(path, 3)
    assert exc.value.exit_code == ExitCode.USAGE


# --- the appender ----------------------------------------------------------------------------------------


def test_append_loops_over_short_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: a short os.write used to be ignored, leaving a torn line behind a "successful" append.
    real_write = os.write
    calls: list[int] = []

    def short_write(fd: int, data: Any) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data[:7]))

    monkeypatch.setattr(records.os, "write", short_write)
    path = tmp_path / RECORDS
    records.append_record(str(path), prompt_record(0))
    records.append_record(str(path), prompt_record(1))
    monkeypatch.undo()
    assert len(calls) > 20
    assert [r["prompt_id"] for r in scan_records(path, 3).records] == ["p0", "p1"]


def test_append_that_hits_a_full_disk_raises_and_ends_the_worker_with_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    path = tmp_path / RECORDS
    job = tmp_path / "job.json"
    job.write_text("{}")
    monkeypatch.setattr(records.os, "write", full)
    monkeypatch.setattr(worker, "run_job", lambda job: records.append_record(str(path), prompt_record(0)) or 0)
    assert worker.main([str(job)]) == 3
    events = [json.loads(x[len(records.EVENT_PREFIX) :]) for x in capsys.readouterr().out.splitlines()]
    assert events == [{"event": "error", "error": "OSError: [Errno 28] No space left on device"}]


def test_append_takes_an_exclusive_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Workers under --jobs share one records.jsonl: an append waits for the lock another holds.
    path = tmp_path / RECORDS
    path.touch()
    holder = os.open(path, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    asked, done = threading.Event(), threading.Event()
    flock = fcntl.flock

    def asking(fd: int, operation: int) -> None:
        # The appender asks for the lock: from here it cannot write until the holder lets go.
        if operation & fcntl.LOCK_EX:
            asked.set()
        flock(fd, operation)

    monkeypatch.setattr(records.fcntl, "flock", asking)
    t = threading.Thread(target=lambda: (records.append_record(str(path), prompt_record(0)), done.set()))
    t.start()
    assert asked.wait(10), "the append never asked for the lock"
    assert not done.is_set() and path.read_bytes() == b""
    fcntl.flock(holder, fcntl.LOCK_UN)
    os.close(holder)
    t.join(5)
    assert done.is_set() and len(scan_records(path, 3).records) == 1


def test_concurrent_appenders_keep_every_line_whole(tmp_path: Path) -> None:
    path = tmp_path / RECORDS
    big = "x" * 100_000  # far beyond PIPE_BUF: whole lines only because of the lock and the write loop

    def writer(w: int) -> None:
        for i in range(15):
            records.append_record(str(path), prompt_record(i, cell=f"c{w}", output_head=big))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = scan_records(path, 3)
    assert len(got.records) == 60 and not got.warnings


# --- run folders and the manifest ------------------------------------------------------------------------


def test_runs_started_at_once_never_share_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: exists-then-mkdir let two runs in one second race for one folder (one crashed or both
    # appended to the same records). mkdir is the claim now.
    fixed = manifest_module.datetime(2026, 12, 3, tzinfo=manifest_module.timezone.utc)

    class Frozen(manifest_module.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return fixed

    monkeypatch.setattr(manifest_module, "datetime", Frozen)
    barrier = threading.Barrier(12)
    made: list[Path] = []
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            made.append(new_run_dir(tmp_path / "runs", "cfg"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({p.name for p in made}) == 12
    assert sorted(p.name for p in made)[0] == "20261203T000000Z-cfg"
    assert all((p / "logs").is_dir() and (p / RECORDS).is_file() for p in made)


def test_output_folder_that_is_a_file_is_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "runs"
    f.write_text("")
    with pytest.raises(UserError, match="output folder is a file") as exc:
        new_run_dir(f, "cfg")
    assert exc.value.exit_code == ExitCode.USAGE


def test_manifest_write_on_a_full_disk_is_exit_3_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / MANIFEST
    write_json_atomic(path, {"v": 1})

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(manifest_module.os, "fsync", full)
    with pytest.raises(StorageError, match=r"manifest\.json: cannot write: No space left on device") as exc:
        write_json_atomic(path, {"v": 2})
    assert exc.value.exit_code == ExitCode.RUN_FAILED
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST]  # no temp file left behind


# --- typed models ----------------------------------------------------------------------------------------


def test_manifest_is_parsed_into_a_typed_model(make_run: Callable[..., Path]) -> None:
    run = load_run(make_run({"cpu/eager/stock": [GOOD_RATES, GOOD_RATES]}))
    assert run.meta is not None
    assert run.meta.k == 3 and run.meta.config.gate.tolerance_pts == DEFAULT_TOLERANCE_PTS
    assert [(c.cell, c.repeat, c.status) for c in run.meta.cells] == [
        ("cpu/eager/stock", 0, "ok"),
        ("cpu/eager/stock", 1, "ok"),
    ]


@pytest.mark.parametrize(
    ("schema", "needle"),
    [(SCHEMA_VERSION + 1, "is newer than mtpbench"), (0, "is older than mtpbench"), ("1", "expected an integer")],
)
def test_newer_and_older_schemas_are_told_apart(make_run: Callable[..., Path], schema: Any, needle: str) -> None:
    run = make_run({"cpu/eager/stock": [GOOD_RATES]})
    m = json.loads((run / MANIFEST).read_text())
    (run / MANIFEST).write_text(json.dumps({**m, "schema": schema}))
    with pytest.raises(UserError, match=f"run schema .*{needle}" if needle != "expected an integer" else needle):
        load_run(run)


def test_a_frozen_real_run_of_schema_1_keeps_loading() -> None:
    # Written by a real engine (mtpbench selftest on the tiny pair, see tests/data/runs/README.md): the
    # validation must accept everything a real worker writes.
    frozen = Path(__file__).resolve().parents[2] / "data" / "runs" / "schema1-selftest"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = load_run(frozen)
    prompts = [r for r in run.records if r["type"] == "prompt"]
    assert len(prompts) == 20 and run.meta is not None and run.meta.k == 3
    assert {c.status for c in run.meta.cells} == {"ok"}


def test_ray_results_appended_after_a_torn_line_stay_readable(tmp_path: Path) -> None:
    # The Ray executor appends a worker's lines in one go; it shares the worker's lock and torn-line mark.
    from mtpbench.run.executors import append_lines

    path = tmp_path / RECORDS
    path.write_text(json.dumps(prompt_record(0)) + "\n" + json.dumps(prompt_record(1))[:30])
    append_lines(str(path), json.dumps(prompt_record(2)) + "\n" + json.dumps(prompt_record(3)))
    got = scan_records(path, 3)
    assert [r["prompt_id"] for r in got.records] == ["p0", "p2", "p3"] and len(got.warnings) == 1


def test_the_worker_stamps_records_with_the_schema_the_readers_accept() -> None:
    """The engine's writers take SCHEMA_VERSION from schema.py itself and import, at module level, only the
    standard library, schema.py and their own stage (the worker runs in the build's interpreter)."""
    import ast
    import sys

    from mtpbench.schema import SCHEMA_VERSION

    job = dict.fromkeys(("run_id", "cell", "build", "mode", "variant", "repeat", "hash_seed"))
    assert records.base_record(job)["schema"] == SCHEMA_VERSION
    for module in (worker, records):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
        names |= {str(n.module) for n in top if isinstance(n, ast.ImportFrom)}
        ours = {m for m in names if m == "mtpbench.schema" or m.startswith("mtpbench.engine.")}
        assert {m.split(".")[0] for m in names - ours} <= set(sys.stdlib_module_names) | {"__future__"}, names


def test_files_written_through_a_temp_file_get_the_mode_open_would_give(tmp_path: Path) -> None:
    # mkstemp makes 0600 files: a manifest, a columnar copy or a history cache nobody else could read.
    import shutil
    import stat

    from mtpbench.judge import history
    from mtpbench.store import columnar
    from mtpbench.store.manifest import write_json_atomic

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[2] / "data" / "runs" / "tiny-stock-fault", run)
    for derived in (columnar.COPY, history.POINT_CACHE):  # a checkout may hold caches of its own
        (run / derived).unlink(missing_ok=True)
    old = os.umask(0o027)
    try:
        write_json_atomic(tmp_path / "m.json", {"a": 1})
        assert refresh_copy(run) is not None
        history.refresh_point(run)
    finally:
        os.umask(old)
    for f in (tmp_path / "m.json", run / columnar.COPY, run / history.POINT_CACHE):
        assert stat.S_IMODE(f.stat().st_mode) == 0o640, f
