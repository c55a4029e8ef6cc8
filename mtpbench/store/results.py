"""Run storage: `runs/<id>/manifest.json` (what was asked, what happened) + `records.jsonl` (what was measured).

records.jsonl is append-only and written by the workers as prompts finish (`engine/records.append_record`: one
locked, complete write per line); manifest.json is rewritten atomically (temp file + rename) by the runner
when a cell changes state, so a crash or Ctrl-C loses at most the prompt in flight and never leaves a
half-written manifest.

Reading is where untrusted files meet the rest of mtpbench, so everything is validated once, on the way in
(`load_run`): the manifest is parsed into a typed model (manifest.py's `Manifest`), every record into its
own (records.py's `PromptRecord`, `CellStart`, `CellEnd`), and counts that cannot be (accepted > drafts,
per-position counts that grow or have the wrong length, more draft tokens than k × drafts) are refused
with the file and line. A crash mid-write leaves a truncated last line: it is reported (`Run.warnings`,
also issued as a `DataWarning`) and ignored, and the next append marks it with a `torn` record so it stays
readable once lines follow it. Anything else unreadable is a `UserError` naming the file, line and key.

Format history (`schema.SCHEMA_VERSION`), pyperf-style:
- 1 (mtpbench 0.1): manifest {schema, tool, tool_version, run_id, created, finished, status, config,
  config_path, prompts{name, sha256, ids}, cells[{cell, build, mode, variant, repeat, hash_seed,
  status, error, log, wall_s, engine_start_s}]}; records: one JSON object a line, `type` in
  cell_start | prompt | cell_end | torn (the line before it was cut off by a crash), every line carries
  `schema`. The soak workload (same schema) adds `round` and `uptime_s` to its prompt records (a prompt is
  then recorded once per round) and a `round_end` record per round.
Files of another schema are refused with a message saying whether they are newer or older, never guessed at.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from mtpbench.config import path_kind
from mtpbench.errors import DataWarning, UserError
from mtpbench.store.manifest import MANIFEST, Manifest, read_manifest
from mtpbench.store.records import PROMPT_COLUMNS, RECORDS, scan_records


@dataclass
class Run:
    path: Path
    manifest: dict[str, Any]
    _records: list[dict[str, Any]] | None = None
    meta: Manifest | None = None
    warnings: list[str] = field(default_factory=list)
    # From the columnar copy (columnar.py): the prompt frame and the non-prompt records, so that loading a
    # run of 10⁶ prompts never builds 10⁶ dicts. `records` then parses the JSONL only if someone asks.
    frame: pd.DataFrame | None = None
    meta_records: list[dict[str, Any]] | None = None

    @property
    def records(self) -> list[dict[str, Any]]:
        if self._records is None:
            recs = scan_records(
                self.path / RECORDS, _ks(self.meta) if self.meta else None, self.meta.run_id if self.meta else None
            )
            self._records = current_attempts(recs.records, self.manifest["cells"])
        return self._records

    @property
    def run_id(self) -> str:
        return str(self.manifest["run_id"])

    @property
    def typed(self) -> Manifest:
        """The manifest as its typed model (validated once by load_run; here for a Run made by hand)."""
        if self.meta is None:
            self.meta = Manifest.model_validate(self.manifest)
        return self.meta

    def prompt_frame(self) -> pd.DataFrame:
        if self.frame is not None:
            return self.frame
        rows = [r for r in self.records if r.get("type") == "prompt"]
        return pd.DataFrame(rows, columns=[*PROMPT_COLUMNS, "per_request", "output_head"] if not rows else None)

    def cell_starts(self) -> list[dict[str, Any]]:
        return self._meta("cell_start")

    def round_ends(self) -> list[dict[str, Any]]:
        """A soak's round_end records (engine/soak.py), in the order they were written."""
        return self._meta("round_end")

    def _meta(self, kind: str) -> list[dict[str, Any]]:
        meta = self.meta_records if self.meta_records is not None else self.records
        return [r for r in meta if r.get("type") == kind]

    def cell_ends(self) -> list[dict[str, Any]]:
        meta = self.meta_records if self.meta_records is not None else self.records
        return [r for r in meta if r.get("type") == "cell_end"]


def load_run(path: str | Path) -> Run:
    p = Path(path)
    kind = path_kind(p, "a run folder")
    if kind == "file" and p.name in (MANIFEST, RECORDS):
        p, kind = p.parent, "dir"
    if kind == "missing":
        raise UserError(f"{p}: no such run folder")
    if kind != "dir":
        raise UserError(f"{p}: not a run folder (a file)")
    manifest, meta = read_manifest(p / MANIFEST)
    import mtpbench.store.columnar as columnar

    cached = columnar.read_copy(p)
    if cached is not None:
        frame, meta_records, said = cached
        for w in said:
            warnings.warn(w, DataWarning, stacklevel=2)
        cells = manifest["cells"]
        return Run(
            p,
            manifest,
            None,
            meta,
            said,
            frame=current_attempts_frame(frame, cells),
            meta_records=current_attempts(meta_records, cells),
        )
    recs = scan_records(p / RECORDS, _ks(meta), meta.run_id)
    for w in recs.warnings:
        warnings.warn(w, DataWarning, stacklevel=2)
    # All attempts go into the copy; which attempt is current is the manifest's to say, at every load.
    columnar.write_copy(p, recs.records, recs.warnings)  # best effort: the next load is fast
    return Run(p, manifest, current_attempts(recs.records, manifest["cells"]), meta, recs.warnings)


def current_attempts(records: list[dict[str, Any]], cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Only the records of each repeat's current attempt (the manifest's): a resumed run re-runs failed or
    interrupted repeats as a new attempt, and the records an earlier attempt left must not count twice.
    Records and manifest entries without an attempt (runs before resume existed) are attempt 1."""
    want = {(c.get("cell"), c.get("repeat")): c.get("attempt", 1) for c in cells if isinstance(c, dict)}
    return [r for r in records if r.get("attempt", 1) == want.get((r.get("cell"), r.get("repeat")), 1)]


def current_attempts_frame(frame: pd.DataFrame, cells: list[dict[str, Any]]) -> pd.DataFrame:
    """current_attempts for the columnar prompt frame (vectorised: runs of 10⁶ prompts stay fast)."""
    want = {(c.get("cell"), c.get("repeat")): int(c.get("attempt", 1) or 1) for c in cells if isinstance(c, dict)}
    have = frame["attempt"].fillna(1).astype("int64") if "attempt" in frame else None
    if (have is None or bool((have == 1).all())) and all(a == 1 for a in want.values()):
        return frame  # never resumed: every record is attempt 1
    keys = pd.MultiIndex.from_arrays([frame["cell"], frame["repeat"]])
    wanted = pd.Series(want, dtype="int64").reindex(keys).fillna(1).to_numpy()
    got = have.to_numpy() if have is not None else 1
    return frame[got == wanted].reset_index(drop=True)


def timing(manifest: dict[str, Any]) -> dict[str, float]:
    """Where a run's wall time went: total over cell-repeats, engine start-up, and the rest (prompts)."""
    cells = manifest.get("cells", [])
    total = sum(float(c.get("wall_s") or 0.0) for c in cells)
    engine = sum(float(c.get("engine_start_s") or 0.0) for c in cells)
    return {"cells": float(len(cells)), "wall_s": total, "engine_start_s": engine, "other_s": max(total - engine, 0.0)}


def refresh_copy(run_dir: Path) -> Path | None:
    """Make the columnar copy fresh (called when a run ends); a records file the reader refuses gets no copy
    and is reported by whoever loads the run next, with the reader's own message."""
    import mtpbench.store.columnar as columnar

    if columnar.read_copy(run_dir) is not None:
        return run_dir / columnar.COPY
    try:
        recs = scan_records(run_dir / RECORDS, run_id=read_manifest(run_dir / MANIFEST)[1].run_id)
    except UserError:
        return None
    return columnar.write_copy(run_dir, recs.records, recs.warnings)


def _ks(meta: Manifest) -> int | dict[str, int]:
    """What the record reader checks positions against: the run's k, or each cell's in a k sweep."""
    return meta.cell_ks() if meta.sweep else meta.k
