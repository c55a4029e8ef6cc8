"""Where runs and baselines live on disk: the manifest, the append-only records and their columnar copy,
baselines. Reads and validates files; judges nothing.

The stage's face, by what a caller wants:
- read a run: `load_run` (manifest and records validated once, the columnar copy used when fresh) gives a
  `Run`; `refresh_copy` makes the copy when a run ends; `current_attempts` keeps a resumed repeat's records.
- write a run: `RunWriter` (writer.py) for the manifest and, where no worker writes them, the records;
  `new_run_dir`, `new_manifest`, `write_json_atomic`, `ensure_out_dir` and `read_manifest` (manifest.py).
- records: `scan_records` / `read_records` read them, `dump_record` writes one line, `count_problem` says
  which counts cannot be (records.py).
- baselines: `load_baseline`, `write_baseline`, `dump_baseline`, `baseline_from_cells`, `run_fingerprint`,
  `model_identity` (baseline.py); an upstream test's golden is `UpstreamGolden` (upstream.py).
The columnar copy's own functions (columnar.py: `read_copy`, `write_copy`, `COPY`) are the readers' business
and are imported by module name.
"""

from __future__ import annotations

from mtpbench.store.baseline import (
    Baseline,
    BaselineEntry,
    baseline_from_cells,
    dump_baseline,
    load_baseline,
    model_identity,
    run_fingerprint,
    write_baseline,
)
from mtpbench.store.manifest import (
    MANIFEST,
    Manifest,
    ManifestCell,
    ManifestConfig,
    ensure_out_dir,
    new_manifest,
    new_run_dir,
    now_iso,
    read_manifest,
    write_json_atomic,
)
from mtpbench.store.records import RECORDS, Counts, count_problem, dump_record, read_records, scan_records
from mtpbench.store.results import Run, current_attempts, load_run, refresh_copy, timing
from mtpbench.store.upstream import UpstreamGolden
from mtpbench.store.writer import RunWriter

__all__ = [
    "MANIFEST",
    "RECORDS",
    "Baseline",
    "BaselineEntry",
    "Counts",
    "Manifest",
    "ManifestCell",
    "ManifestConfig",
    "Run",
    "RunWriter",
    "UpstreamGolden",
    "baseline_from_cells",
    "count_problem",
    "current_attempts",
    "dump_baseline",
    "dump_record",
    "ensure_out_dir",
    "load_baseline",
    "load_run",
    "model_identity",
    "new_manifest",
    "new_run_dir",
    "now_iso",
    "read_manifest",
    "read_records",
    "refresh_copy",
    "run_fingerprint",
    "scan_records",
    "timing",
    "write_baseline",
    "write_json_atomic",
]
