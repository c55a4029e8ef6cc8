"""The columnar copy (records.parquet): written on load and at run end, read instead of the JSONL while
fresh, rebuilt (and the JSONL re-validated) when the JSONL changes, never required."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mtpbench.errors import DataWarning
from mtpbench.judge import evidence
from mtpbench.store import columnar
from mtpbench.store.records import RECORDS, read_records
from mtpbench.store.results import Run, load_run, refresh_copy

CELLS = {"b/eager/stock": [[97.0, 93.5, 92.3], [97.0, 93.5, 92.3]], "b/compiled/stock": [[60.0, 50.0, 40.0]]}


def _cells(run: Run) -> list[tuple[str, int, tuple[int, ...]]]:
    return [(c.cell, c.summary.counts.num_drafts, c.summary.counts.accepted_per_pos) for c in evidence.collect(run)]


def test_load_writes_the_copy_and_reads_it_next_time(
    make_run: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_run(CELLS)
    first = load_run(path)
    assert (path / columnar.COPY).is_file()
    want = _cells(first)

    def no_jsonl(p: Path) -> list[dict]:
        raise AssertionError("the JSONL was parsed although the copy is fresh")

    monkeypatch.setattr("mtpbench.store.records.read_records", no_jsonl)
    second = load_run(path)
    assert second.frame is not None and second.meta_records is not None
    assert _cells(second) == want  # the same verdict inputs from either path
    assert [r["type"] for r in second.meta_records] == ["cell_start"] * 3


def test_copy_keeps_every_prompt_field(make_run: Callable[..., Path]) -> None:
    path = make_run(CELLS)
    records = read_records(path / RECORDS)
    columnar.write_copy(path, records)
    frame, other, said = columnar.read_copy(path)  # type: ignore[misc]
    assert said == []
    prompts = [r for r in records if r["type"] == "prompt"]
    assert len(frame) == len(prompts) and len(other) == len(records) - len(prompts)
    assert np.array_equal(columnar.positions(frame, 3), np.array([r["accepted_per_pos"] for r in prompts]))
    assert list(frame["output_sha256"]) == [r["output_sha256"] for r in prompts]


def test_appended_records_make_the_copy_stale(make_run: Callable[..., Path]) -> None:
    path = make_run(CELLS)
    load_run(path)
    lines = (path / RECORDS).read_text().splitlines()
    extra = json.loads(next(line for line in lines if '"prompt"' in line))
    extra.update(repeat=1, hash_seed=1, cell="b/compiled/stock", build="b", mode="compiled")
    with (path / RECORDS).open("a") as f:
        f.write(json.dumps(extra) + "\n")
    assert columnar.read_copy(path) is None  # size changed: stale
    run = load_run(path)
    assert len(run.prompt_frame()) == len(lines) - 3 + 1  # rebuilt from the JSONL, the new line included
    assert columnar.read_copy(path) is not None  # and rewritten


def test_a_corrupt_jsonl_is_reported_even_with_a_copy(make_run: Callable[..., Path]) -> None:
    path = make_run(CELLS)
    load_run(path)
    with (path / RECORDS).open("a") as f:
        f.write('{"type": "prompt", "cell": ')  # a write cut off by a crash
    # The JSONL changed, so the copy is stale: the authoritative reader runs, reports the torn last line
    # and skips it (issue 11), instead of the copy silently answering.
    with pytest.warns(DataWarning, match="cut off by a crash"):
        run = load_run(path)
    assert run.warnings and "cut off by a crash" in run.warnings[0]
    # The copy written by that load is fresh now: the next load reads it, and says the same again (it used
    # to be silent there, so only the first command after a crash mentioned the torn line).
    assert columnar.read_copy(path) is not None
    with pytest.warns(DataWarning, match="cut off by a crash"):
        again = load_run(path)
    assert again.frame is not None and again.warnings == run.warnings


def test_same_size_edit_is_caught_by_mtime(make_run: Callable[..., Path]) -> None:
    path = make_run(CELLS)
    load_run(path)
    rec = path / RECORDS
    st = rec.stat()
    os.utime(rec, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert columnar.read_copy(path) is None


def test_without_pyarrow_the_jsonl_is_read(make_run: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar, "available", lambda: False)
    path = make_run(CELLS)
    run = load_run(path)
    assert not (path / columnar.COPY).exists() and run.frame is None
    assert _cells(run)[0][1] > 0


def test_read_only_run_folder_still_loads(make_run: Callable[..., Path]) -> None:
    path = make_run(CELLS)
    path.chmod(0o555)
    try:
        if os.access(path, os.W_OK):  # root ignores the mode bits
            pytest.skip("running as root: cannot make a folder read-only")
        assert _cells(load_run(path))
        assert not (path / columnar.COPY).exists()
    finally:
        path.chmod(0o755)


def test_a_damaged_copy_is_ignored(make_run: Callable[..., Path]) -> None:
    path = make_run(CELLS)
    load_run(path)
    data = (path / columnar.COPY).read_bytes()
    (path / columnar.COPY).write_bytes(data[: len(data) // 2])
    st = (path / RECORDS).stat()
    assert columnar.read_copy(path) is None
    assert (path / RECORDS).stat() == st
    assert _cells(load_run(path))


def test_refresh_at_run_end(make_run: Callable[..., Path]) -> None:
    path = make_run(CELLS)
    assert refresh_copy(path) == path / columnar.COPY and columnar.read_copy(path) is not None
    (path / RECORDS).write_text("not json\n")
    assert refresh_copy(path) is None  # the loader reports it, with the reader's message


@pytest.mark.parametrize("field", ["other_records", "warnings"])
def test_a_copy_with_foreign_metadata_is_not_believed(make_run: Callable[..., Path], field: str) -> None:
    import pyarrow.parquet as pq

    path = make_run(CELLS)
    load_run(path)
    table = pq.read_table(path / columnar.COPY)
    meta = json.loads(table.schema.metadata[b"mtpbench.columnar"])
    meta[field] = 7
    src = (path / RECORDS).stat()
    pq.write_table(
        table.replace_schema_metadata({**table.schema.metadata, b"mtpbench.columnar": json.dumps(meta)}),
        path / columnar.COPY,
    )
    os.utime(path / RECORDS, ns=(src.st_atime_ns, src.st_mtime_ns))
    assert columnar.read_copy(path) is None
    assert len(load_run(path).prompt_frame()) > 0  # the JSONL answers instead
