"""Run storage: `runs/<id>/manifest.json` (what was asked, what happened) + `records.jsonl` (what was measured).

records.jsonl is append-only and written by the workers as prompts finish (`worker.append_record`: one
locked, complete write per line); manifest.json is rewritten atomically (temp file + rename) by the runner
when a cell changes state, so a crash or Ctrl-C loses at most the prompt in flight and never leaves a
half-written manifest.

Reading is where untrusted files meet the rest of mtpbench, so everything is validated here, once: the
manifest is parsed into a typed model (`Manifest`), every record into its own (`PromptRecord`,
`CellStart`, `CellEnd`), and counts that cannot be (accepted > drafts, per-position counts that grow or
have the wrong length, more draft tokens than k × drafts) are refused with the file and line. A crash
mid-write leaves a truncated last line: it is reported (`Run.warnings`, also issued as a `DataWarning`)
and ignored, and the next append marks it with a `torn` record so it stays readable once lines follow it.
Anything else unreadable is a `UserError` naming the file, line and key.

Format history (`schema.SCHEMA_VERSION`), pyperf-style:
- 1 (mtpbench 0.1): manifest {schema, tool, tool_version, run_id, created, finished, status, config,
  config_path, prompts{name, sha256, ids}, cells[{cell, build, mode, variant, repeat, hash_seed,
  status, error, log, wall_s, engine_start_s}]}; records: one JSON object a line, `type` in
  cell_start | prompt | cell_end | torn (the line before it was cut off by a crash), every line carries
  `schema`.
Files of another schema are refused with a message saying whether they are newer or older, never guessed at.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from mtpbench import __version__
from mtpbench.config import GateSpec, path_kind
from mtpbench.errors import DataWarning, StorageError, UserError
from mtpbench.schema import SCHEMA_VERSION, CellStatus, schema_problem
from mtpbench.store.files import share_mode

__all__ = ["MANIFEST", "RECORDS", "SCHEMA_VERSION", "DataWarning", "Manifest", "Run", "load_run", "read_records"]

MANIFEST = "manifest.json"
RECORDS = "records.jsonl"

PROMPT_COLUMNS = [
    "cell", "build", "mode", "variant", "repeat", "hash_seed", "prompt_id", "prompt_index",
    "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos",
    "num_generated_tokens", "output_sha256", "wall_s",
]  # fmt: skip

# Bounds that no real run comes near, so that 10**30 or a bool is a typed error, not a silent number:
# counts stay exact as JSON numbers (2**53), repeats and PYTHONHASHSEED within what the runner can set.
MAX_COUNT = 2**53
Count = Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]
RepeatIndex = Annotated[StrictInt, Field(ge=0, le=10_000)]
HashSeed = Annotated[StrictInt, Field(ge=0, le=4294967295)]
Attempt = Annotated[StrictInt, Field(ge=1, le=10_000)]  # --resume re-runs a repeat as attempt 2, 3, …
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
# A run id names a folder: no separators, no "..", nothing hidden.
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: Any) -> None:
    """Temp file + fsync + rename: readers see the old or the new file, never half of one. A failed write
    (disk full, folder gone) is a StorageError (exit 3) and leaves the old file in place."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise StorageError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        share_mode(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise StorageError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def ensure_out_dir(out: Path) -> None:
    """The folder runs go into: created if missing; a file, a dangling path or an impossible name is a
    one-line UserError before anything is written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"{out}: output folder is a file, not a folder") from None
    except OSError as exc:
        raise UserError(f"{out}: cannot create the output folder: {exc.strerror or exc}") from None


def new_run_dir(out: Path, config_name: str) -> Path:
    """A fresh `<out>/<UTC stamp>-<config name>[-n]` folder that no other run shares.

    The folder itself is the claim: `mkdir` succeeds for exactly one caller, so two runs started in the
    same second (or racing from two shells / CI jobs on one --out) take different names instead of one
    appending to the other's records."""
    ensure_out_dir(out)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = f"{stamp}-{config_name}"
    for n in range(1, 10_000):
        path = out / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise UserError(f"{path}: cannot create the run folder: {exc.strerror or exc}") from None
        try:
            (path / "logs").mkdir()
            (path / RECORDS).touch()
        except OSError as exc:
            raise StorageError(f"{path}: cannot create the run folder: {exc.strerror or exc}") from None
        return path
    raise UserError(f"{out}: too many runs named {base!r}")


def new_manifest(run_id: str, config: dict[str, Any], config_path: str, prompts: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "tool": "mtpbench",
        "tool_version": __version__,
        "run_id": run_id,
        "created": now_iso(),
        "finished": None,
        "status": "running",
        "config_path": config_path,
        "config": config,
        "prompts": prompts,
        "cells": [],
    }


# --- typed models of what is on disk --------------------------------------------------------------------
# Unknown keys are kept (extra="allow"): newer writers of the same schema may add fields; what is read
# here is checked for type and range.


class _OnDisk(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class ManifestCell(_OnDisk):
    cell: str = Field(min_length=1)
    build: str = Field(min_length=1)
    mode: str = Field(min_length=1)
    variant: str = Field(min_length=1)
    repeat: RepeatIndex
    hash_seed: HashSeed | None = None
    attempt: Attempt | None = None
    status: CellStatus = CellStatus.PENDING
    error: str | None = None
    log: str | None = None
    wall_s: Seconds | None = None
    engine_start_s: Seconds | None = None


class ManifestSpeculative(_OnDisk):
    method: str = Field(min_length=1)
    num_speculative_tokens: Annotated[StrictInt, Field(gt=0, le=64)]


class ManifestSampling(_OnDisk):
    temperature: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    max_tokens: StrictInt | None = None


class ManifestConfig(_OnDisk):
    """The resolved config the run was made with (config.py's ExperimentConfig, as the runner wrote it)."""

    name: str | None = None
    speculative: ManifestSpeculative
    sampling: ManifestSampling = Field(default_factory=ManifestSampling)
    gate: GateSpec = Field(default_factory=GateSpec)
    baseline: str | None = None  # the baseline the config names (compare accepts it without --accept-unchecked)
    baseline_entry: dict[str, str] = Field(default_factory=dict)  # cell or build/mode -> build/mode of an entry
    reference_mode: str | None = None
    modes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    workload: dict[str, Any] | None = None  # None: the offline probe

    @property
    def workload_kind(self) -> str:
        return str((self.workload or {}).get("kind") or "offline")


class ManifestPrompts(_OnDisk):
    name: str | None = None
    sha256: str = Field(min_length=1)
    ids: list[str] = Field(default_factory=list)


class Manifest(_OnDisk):
    """manifest.json, typed. `Run.manifest` keeps the raw dict for code that reads extra keys."""

    schema_version: StrictInt = Field(alias="schema")
    run_id: str
    status: str = "running"
    created: str | None = None
    finished: str | None = None
    tool_version: str | None = None
    config: ManifestConfig
    prompts: ManifestPrompts
    cells: list[ManifestCell] = Field(min_length=1)  # a run of no cells measured nothing: never a pass

    @field_validator("run_id")
    @classmethod
    def _folder_name(cls, v: str) -> str:
        if not RUN_ID.match(v) or ".." in v:
            raise ValueError("a run id is a folder name: letters, digits, '.', '_', '-', no '..' or '/'")
        return v

    @property
    def k(self) -> int:
        return self.config.speculative.num_speculative_tokens


class Counts(_OnDisk):
    num_drafts: Count
    num_draft_tokens: Count
    num_accepted_tokens: Count
    accepted_per_pos: list[Count] = Field(max_length=64)


def count_problem(c: Counts, k: int | None) -> str | None:
    """Why these counts cannot come from a speculative decoder with k draft tokens, or None.

    Acceptance is a prefix (position i is accepted only if 0..i-1 were), so accepted_per_pos is
    non-increasing and its first entry at most num_drafts; every accepted token was drafted, and a draft
    proposes at most k tokens."""
    pos = c.accepted_per_pos
    if k is not None and len(pos) != k:
        return f"accepted_per_pos: {len(pos)} positions, but k is {k}"
    # One pass (this runs for every record of every run that is read).
    prev, total = c.num_drafts, 0
    for i, a in enumerate(pos):
        if a > prev:
            if i == 0:
                return f"accepted_per_pos: {a} accepted at position 0 but only {c.num_drafts} drafts"
            return f"accepted_per_pos: {pos} grows with the position (acceptance is a prefix: it cannot)"
        prev, total = a, total + a
    if total != c.num_accepted_tokens:
        return f"num_accepted_tokens: {c.num_accepted_tokens}, but accepted_per_pos sums to {total}"
    if c.num_accepted_tokens > c.num_draft_tokens:
        return f"num_accepted_tokens: {c.num_accepted_tokens} accepted of {c.num_draft_tokens} draft tokens"
    kk = k if k is not None else len(pos)
    if c.num_draft_tokens > kk * c.num_drafts:
        return f"num_draft_tokens: {c.num_draft_tokens} draft tokens in {c.num_drafts} drafts of k={kk}"
    return None


class RecordBase(_OnDisk):
    schema_version: StrictInt = Field(alias="schema")
    type: str = Field(min_length=1)
    cell: str = Field(min_length=1)
    repeat: RepeatIndex
    build: str | None = None
    mode: str | None = None
    variant: str | None = None
    hash_seed: HashSeed | None = None
    attempt: Attempt | None = None


class PromptRecord(RecordBase, Counts):
    type: Literal["prompt"]
    prompt_id: str = Field(min_length=1)
    prompt_index: Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)] | None = None
    output_sha256: str = Field(min_length=1)
    num_generated_tokens: Count | None = None
    wall_s: Seconds | None = None
    per_request: Counts | None = None


class CellStart(RecordBase):
    type: Literal["cell_start"]
    requested: dict[str, Any] = Field(default_factory=dict)
    effective: dict[str, Any] = Field(default_factory=dict)
    patches: list[Any] = Field(default_factory=list)
    engine_start_s: Seconds | None = None


class CellEnd(RecordBase):
    type: Literal["cell_end"]
    wall_s: Seconds | None = None
    engine_start_s: Seconds | None = None


TORN = "torn"


class TornMark(_OnDisk):
    """Written by worker.append_record right after a line that a crash cut off (of any cell), so that the
    cut-off line, now in the middle of the file, is still told apart from garbage."""

    schema_version: StrictInt = Field(alias="schema")
    type: Literal["torn"]
    bytes: Count | None = None


# Records of other types (added by newer writers of the same schema) are checked against RecordBase.
RECORD_MODELS: dict[str, type[_OnDisk]] = {
    "prompt": PromptRecord, "cell_start": CellStart, "cell_end": CellEnd, TORN: TornMark,
}  # fmt: skip


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        msg = "missing"
    return f"{loc}: {msg}"


@dataclass
class Records:
    records: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)


def _parse_line(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return _UNPARSABLE


_UNPARSABLE = object()


def _check_record(where: str, rec: Any, k: int | None) -> dict[str, Any]:
    if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
        raise UserError(f"{where}: not a mtpbench record (no 'type')")
    problem = schema_problem(rec.get("schema"), SCHEMA_VERSION, "record")
    if problem:
        raise UserError(f"{where}: {problem}")
    model = RECORD_MODELS.get(rec["type"], RecordBase)
    try:
        parsed = model.model_validate(rec)
    except ValidationError as exc:
        raise UserError(f"{where}: {rec['type']} record: {_first_error(exc)}") from None
    if isinstance(parsed, PromptRecord):
        for key, counts in (("", parsed), ("per_request.", parsed.per_request)):
            why = count_problem(counts, k) if counts is not None else None
            if why:
                raise UserError(f"{where}: impossible counts: {key}{why}")
    return rec


def scan_records(path: Path, k: int | None = None, run_id: str | None = None) -> Records:
    """Every record of a records.jsonl, validated; a last line cut off by a crash (and any line a `torn`
    record marks as such) is skipped with a warning, anything else unreadable is a UserError. So is a
    record of another run (`run_id`, when given) and a prompt recorded twice in one attempt of a repeat:
    the worker appends each prompt once, so a second copy means the file was concatenated or copied into,
    and counting it (or keeping one copy silently) would judge evidence nobody can vouch for."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: records file not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: records file is a folder") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read records: {exc.strerror or exc}") from None
    out = Records([])
    seen: dict[tuple[Any, ...], int] = {}
    lines = raw.split(b"\n")
    parsed = [_parse_line(line) if line.strip() else None for line in lines]
    for n, (line, rec) in enumerate(zip(lines, parsed, strict=True), start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        if rec is _UNPARSABLE:
            last = n == len(lines) and not raw.endswith(b"\n")
            marked = n < len(parsed) and isinstance(parsed[n], dict) and parsed[n].get("type") == TORN
            if last or marked:
                out.warnings.append(f"{where}: ignored a line cut off by a crash ({len(line)} bytes)")
                continue
            raise UserError(f"{where}: corrupt JSON (not a record)")
        checked = _check_record(where, rec, k)
        if checked["type"] == TORN:
            continue
        if run_id is not None and checked.get("run_id") not in (None, run_id):
            raise UserError(f"{where}: a record of run {checked['run_id']!r} in run {run_id!r}: records of two "
                            "runs cannot be judged as one")  # fmt: skip
        if checked["type"] == "prompt":
            key = (checked.get("cell"), checked.get("repeat"), checked.get("attempt", 1), checked.get("prompt_id"))
            if key in seen:
                raise UserError(
                    f"{where}: prompt {key[3]!r} of {key[0]} repeat {key[1]} (attempt {key[2]}) is recorded again "
                    f"(first at line {seen[key]}): each prompt is appended once, so the file was concatenated "
                    "or copied into"
                )
            seen[key] = n
        out.records.append(checked)
    return out


def read_records(path: Path, k: int | None = None) -> list[dict[str, Any]]:
    return scan_records(path, k).records


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
            recs = scan_records(self.path / RECORDS, self.meta.k if self.meta else None,
                                self.meta.run_id if self.meta else None)  # fmt: skip
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
        meta = self.meta_records if self.meta_records is not None else self.records
        return [r for r in meta if r.get("type") == "cell_start"]


def read_manifest(mpath: Path) -> tuple[dict[str, Any], Manifest]:
    """manifest.json as its raw dict and its typed model; any problem is a UserError naming the key."""
    try:
        manifest = json.loads(mpath.read_bytes())
    except FileNotFoundError:
        raise UserError(f"{mpath.parent}: not a mtpbench run (no {MANIFEST})") from None
    except IsADirectoryError:
        raise UserError(f"{mpath}: unreadable manifest: a folder, not a file") from None
    except OSError as exc:
        raise UserError(f"{mpath}: unreadable manifest: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise UserError(f"{mpath}: unreadable manifest: {str(exc).splitlines()[0][:200]}") from None
    if not isinstance(manifest, dict):
        raise UserError(f"{mpath}: unreadable manifest: not a JSON object")
    problem = schema_problem(manifest.get("schema"), SCHEMA_VERSION, "run")
    if problem:
        raise UserError(f"{mpath}: {problem}")
    try:
        return manifest, Manifest.model_validate(manifest)
    except ValidationError as exc:
        raise UserError(f"{mpath}: manifest key {_first_error(exc)}") from None


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
    from mtpbench.store import columnar

    cached = columnar.read_copy(p)
    if cached is not None:
        frame, meta_records, said = cached
        for w in said:
            warnings.warn(w, DataWarning, stacklevel=2)
        cells = manifest["cells"]
        return Run(p, manifest, None, meta, said, frame=current_attempts_frame(frame, cells),
                   meta_records=current_attempts(meta_records, cells))  # fmt: skip
    recs = scan_records(p / RECORDS, meta.k, meta.run_id)
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
    from mtpbench.store import columnar

    if columnar.read_copy(run_dir) is not None:
        return run_dir / columnar.COPY
    try:
        recs = scan_records(run_dir / RECORDS, run_id=read_manifest(run_dir / MANIFEST)[1].run_id)
    except UserError:
        return None
    return columnar.write_copy(run_dir, recs.records, recs.warnings)
