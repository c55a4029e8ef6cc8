"""manifest.json: its typed model (`Manifest` and its parts), a fresh run folder and manifest, the atomic
rewrite the runner makes whenever a cell changes state (temp file + fsync + rename: a crash or Ctrl-C never
leaves a half-written manifest) and the reader (`read_manifest`), which refuses a file of another schema
and names the key of any invalid value.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StrictInt, ValidationError, ValidationInfo, field_validator

from mtpbench import __version__
from mtpbench.errors import StorageError, UserError
from mtpbench.schema import SCHEMA_VERSION, CellStatus, RunStatus, schema_problem
from mtpbench.specs import ConfigRole, GateSpec, KAxis, k_or_ks
from mtpbench.store.files import share_mode
from mtpbench.store.records import RECORDS, Attempt, HashSeed, OnDisk, RepeatIndex, Seconds, first_error

MANIFEST = "manifest.json"
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
        "status": RunStatus.RUNNING,
        "config_path": config_path,
        "config": config,
        "prompts": prompts,
        "cells": [],
    }


class ManifestCell(OnDisk):
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
    # A k sweep's cell (issue 38): its k, which its variant name also says (`stock@k3`). None: the run's one k.
    k: Annotated[StrictInt, Field(gt=0, le=64)] | None = None


# The largest k a stored run or baseline may name (a config's own limit is specs.MAX_K): room for a release
# that drafts further without refusing the files it writes.
MAX_STORED_K = 64
KValue = Annotated[StrictInt, Field(gt=0, le=MAX_STORED_K)]


class ManifestSpeculative(KAxis, OnDisk):
    method: str = Field(min_length=1)
    # A list: a k sweep, each cell's k in its manifest entry (runs before issue 38 have one int).
    num_speculative_tokens: KValue | list[KValue]

    @field_validator("num_speculative_tokens", mode="plain")
    @classmethod
    def _k_or_ks(cls, v: Any) -> int | list[int]:
        return k_or_ks(v, MAX_STORED_K)


class ManifestSampling(OnDisk):
    temperature: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    max_tokens: StrictInt | None = None
    # The engine runs through end-of-sequence to max_tokens (the reference's replay stops where it does).
    ignore_eos: bool = False


class ManifestConfig(OnDisk):
    """The resolved config the run was made with (config.py's ExperimentConfig, as the runner wrote it)."""

    name: str | None = None
    role: ConfigRole = "gate"  # runs from before issue 30 had no role: their configs were gates or unlabelled
    speculative: ManifestSpeculative
    sampling: ManifestSampling = Field(default_factory=ManifestSampling)
    gate: GateSpec = Field(default_factory=GateSpec)
    baseline: str | None = None  # the baseline the config names (compare accepts it without --accept-unchecked)
    baseline_entry: dict[str, str] = Field(default_factory=dict)  # cell or build/mode -> build/mode of an entry
    reference_mode: str | None = None
    reference_build: str | None = None  # None: the first build the run lists (judge/signals/builds.py)
    modes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    workload: dict[str, Any] | None = None  # None: the offline probe

    @property
    def workload_kind(self) -> str:
        return str((self.workload or {}).get("kind") or "offline")


class ManifestPrompts(OnDisk):
    name: str | None = None
    sha256: str = Field(min_length=1)
    ids: list[str] = Field(default_factory=list)


class Manifest(OnDisk):
    """manifest.json, typed. `Run.manifest` keeps the raw dict for code that reads extra keys."""

    schema_version: StrictInt = Field(alias="schema")
    run_id: str
    status: RunStatus = RunStatus.RUNNING
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

    @field_validator("cells")
    @classmethod
    def _cell_ks(cls, cells: list[ManifestCell], info: ValidationInfo) -> list[ManifestCell]:
        config = info.data.get("config")
        if config is None:
            return cells
        spec = config.speculative
        for n, c in enumerate(cells):
            if isinstance(spec.num_speculative_tokens, list):
                if c.k is None or c.k not in spec.ks:
                    raise ValueError(f"{n}.k: {c.k!r} is not one of the run's k {spec.ks}")
            elif c.k is not None and c.k != spec.num_speculative_tokens:
                raise ValueError(f"{n}.k: {c.k} but the run's k is {spec.num_speculative_tokens}")
        return cells

    @property
    def k(self) -> int:
        """The run's k; in a k sweep the largest (the width every record fits in: `k_of` gives a cell's)."""
        return max(self.config.speculative.ks)

    @property
    def sweep(self) -> bool:
        return isinstance(self.config.speculative.num_speculative_tokens, list)

    def k_of(self, cell: str) -> int:
        """The k a cell ran with: its manifest entry's in a k sweep, else the run's one k."""
        for c in self.cells:
            if c.cell == cell and c.k is not None:
                return c.k
        return self.k

    def cell_ks(self) -> dict[str, int]:
        """Every cell's k (what the record reader checks each record's positions against)."""
        return {c.cell: c.k if c.k is not None else self.k for c in self.cells}


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
        raise UserError(f"{mpath}: manifest key {first_error(exc)}") from None
