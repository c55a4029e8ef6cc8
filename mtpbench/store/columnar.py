"""The columnar copy of a run's records: `runs/<id>/records.parquet`, for fast reading.

records.jsonl stays the crash-safe write path (workers append a line per prompt). Reading it back means
parsing one JSON object per prompt, which at 10⁶ prompts takes most of a minute; the Parquet copy holds the
prompt records as columns (per-position accepted counts as `acc_pos0..acc_pos{k-1}`, so sums are
vectorised) and the few non-prompt records (cell_start / cell_end) as JSON in the file's metadata.

The copy is written when a run ends and whenever a run is loaded without a fresh one; it is fresh only
while records.jsonl has the size and modification time it was made from, so an appended, edited or
truncated JSONL is re-read (and re-validated) by the authoritative reader in records.py. Without pyarrow
every function here returns None and mtpbench reads the JSONL as before. Nothing here prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mtpbench.schema import PROMPT_SCALAR_COLUMNS
from mtpbench.store.files import share_mode

COPY = "records.parquet"
# Bumped when the copy's layout changes: an older copy is then stale and rebuilt from the JSONL.
COPY_VERSION = 5  # 2: dictionaries of any size (see write_copy); 3: the reader's warnings kept;
# 4: written only from records the reader checked for duplicates and other runs' records; 5: a soak's `round`
_META_KEY = b"mtpbench.columnar"

# Scalar prompt fields kept as columns (anything else of a prompt record goes to `extra_json`): schema.py.
_SCALARS = PROMPT_SCALAR_COLUMNS


_NOT_LOADED = ("output_head", "extra_json")
_LABELS = ("cell", "build", "mode", "variant", "finish_reason", "source")


def _is_text(pa: Any, t: Any) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def available() -> bool:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def _arrow_pool() -> Iterator[None]:
    """Arrow's jemalloc pool (else the system allocator) while the copy is read or written. Measured over
    10⁶ records: with the mimalloc default of pyarrow 26 the load spent 3.5 s in the kernel (page faults and
    madvise of its freed pages), with jemalloc or the system allocator 0.5 s, for the same frame."""
    import pyarrow as pa

    before = pa.default_memory_pool()
    try:
        pool = pa.jemalloc_memory_pool()
    except (NotImplementedError, pa.ArrowNotImplementedError):
        pool = pa.system_memory_pool()
    pa.set_memory_pool(pool)
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def _source_stamp(records_path: Path) -> dict[str, int]:
    st = records_path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def frame_from_records(records: list[dict[str, Any]]) -> pd.DataFrame:
    """The prompt frame (one row per prompt record) with per-position counts as int64 columns."""
    rows = [r for r in records if r.get("type") == "prompt"]
    k = max((len(r.get("accepted_per_pos") or ()) for r in rows), default=0)
    df = pd.DataFrame({c: [r.get(c) for r in rows] for c in _SCALARS})
    acc = np.zeros((len(rows), k), dtype=np.int64)
    for n, r in enumerate(rows):
        vec = r.get("accepted_per_pos") or ()
        acc[n, : len(vec)] = vec
    for i in range(k):
        df[f"acc_pos{i}"] = acc[:, i]
    known = {*_SCALARS, "accepted_per_pos", "type", "schema", "run_id"}
    df["extra_json"] = [
        json.dumps({key: v for key, v in r.items() if key not in known}, sort_keys=True) if set(r) - known else None
        for r in rows
    ]
    return df


def write_copy(run_dir: Path, records: list[dict[str, Any]], warnings: list[str] | None = None) -> Path | None:
    """Write records.parquet beside records.jsonl (atomically); None when pyarrow is missing or the
    folder is not writable (a run read from a read-only CI artifact still loads, from the JSONL)."""
    if not available():
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = run_dir / "records.jsonl"
    try:
        with _arrow_pool():
            return _write(pa, pq, run_dir, src, records, list(warnings or []))
    except OSError:
        return None


def _write(pa: Any, pq: Any, run_dir: Path, src: Path, records: list[dict[str, Any]], warnings: list[str]) -> Path:
    stamp = _source_stamp(src)
    frame = frame_from_records(records)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    meta = {
        "version": COPY_VERSION,
        "source": stamp,
        "k": sum(1 for c in frame.columns if c.startswith("acc_pos")),
        "other_records": [r for r in records if r.get("type") != "prompt"],
        # What the JSONL reader warned about (a line cut off by a crash): every load from the copy says it
        # again, as a load from the JSONL would.
        "warnings": warnings,
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), _META_KEY: json.dumps(meta)})
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=f".{COPY}.", suffix=".tmp")
    os.close(fd)
    try:
        # Parquet stops dictionary-encoding a column once its dictionary passes 1 MB (the default): the
        # prompt ids and output hashes of a large run then went PLAIN, and every read re-hashed 10⁶
        # strings (0.9 s of a 10⁶-record load; 0.15 s with the dictionary kept, and 42 → 16 MB on disk).
        pq.write_table(table, tmp, compression="zstd", dictionary_pagesize_limit=1 << 28)
        share_mode(tmp)
        os.replace(tmp, run_dir / COPY)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return run_dir / COPY


def read_copy(run_dir: Path) -> tuple[pd.DataFrame, list[dict[str, Any]], list[str]] | None:
    """(prompt frame, non-prompt records, the JSONL reader's warnings) from a fresh copy; None when there is
    none, it is stale (the JSONL changed since), of another layout version, unreadable, or pyarrow is
    missing."""
    path = run_dir / COPY
    if not path.is_file() or not available():
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with _arrow_pool():
            got = _read(pa, pq, run_dir, path)
    except Exception:  # a damaged cache is never an error: the JSONL is the truth, read it instead
        return None
    if got is None:
        return None
    frame, meta = got
    # No `accepted_per_pos` list column: every reader takes the acc_pos{i} columns (positions() below);
    # building 10⁶ row views cost 0.2 s of every load.
    other, said = meta.get("other_records"), meta.get("warnings")
    if not isinstance(other, list) or not isinstance(said, list):
        return None  # a copy whose metadata is not what write_copy writes: read the JSONL instead
    return frame, other, [str(w) for w in said]


def _read(pa: Any, pq: Any, run_dir: Path, path: Path) -> tuple[pd.DataFrame, dict[str, Any]] | None:
    """The frame and the copy's metadata, or None when the copy is of another version or stale."""
    pf = pq.ParquetFile(path)
    raw = (pf.schema_arrow.metadata or {}).get(_META_KEY)
    meta = json.loads(raw) if raw else None
    if not meta or meta.get("version") != COPY_VERSION:
        return None
    if meta.get("source") != _source_stamp(run_dir / "records.jsonl"):
        return None
    # The 120-character output heads and the per-request JSON stay on disk (Run.records has them):
    # at 10⁶ prompts they are most of the bytes and no verdict reads them.
    columns = [n for n in pf.schema_arrow.names if n not in _NOT_LOADED]
    # Labels, prompt ids and output hashes as categoricals (Parquet keeps them dictionary-encoded): no
    # 10⁶ strings are built, and a comparison, group-by or factorize on them is one pass over integers.
    text = [c for c in (*_LABELS, "prompt_id", "output_sha256") if c in columns]
    labels = [c for c in text if _is_text(pa, pf.schema_arrow.field(c).type)]
    table = pq.read_table(path, columns=columns, read_dictionary=labels, use_pandas_metadata=False)
    frame = table.to_pandas()
    del table
    return frame, meta


def positions(frame: pd.DataFrame, k: int) -> np.ndarray:
    """The accepted-per-position counts of every prompt row as an (n, k) int64 array."""
    cols = [f"acc_pos{i}" for i in range(k)]
    if all(c in frame.columns for c in cols):
        return frame[cols].to_numpy(dtype=np.int64, copy=False).reshape(len(frame), k)
    out = np.zeros((len(frame), k), dtype=np.int64)
    for n, vec in enumerate(frame["accepted_per_pos"]):
        v = list(vec)[:k]
        out[n, : len(v)] = v
    return out
