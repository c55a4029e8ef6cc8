"""Run storage: `runs/<id>/manifest.json` (what was asked, what happened) + `records.jsonl` (what was measured).

records.jsonl is append-only and written by the workers as prompts finish; manifest.json is rewritten
atomically (temp file + rename) by the runner when a cell changes state, so a crash or Ctrl-C loses at
most the prompt in flight and never leaves a half-written manifest.

Format history (SCHEMA_VERSION), pyperf-style:
- 1 (mtpbench 0.1): manifest {schema, tool, tool_version, run_id, created, finished, status, config,
  config_path, prompts{name, sha256, ids}, cells[{cell, build, mode, variant, repeat, hash_seed,
  status, error, log, wall_s, engine_start_s}]}; records: one JSON object a line, `type` in
  cell_start | prompt | cell_end, every line carries `schema`.
Files of another schema are refused with a clear message, never guessed at.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from mtpbench import __version__
from mtpbench.errors import UserError

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
RECORDS = "records.jsonl"

PROMPT_COLUMNS = [
    "cell", "build", "mode", "variant", "repeat", "hash_seed", "prompt_id", "prompt_index",
    "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos",
    "num_generated_tokens", "output_sha256", "wall_s",
]  # fmt: skip


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def new_run_dir(out: Path, config_name: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = out / f"{stamp}-{config_name}"
    out.mkdir(parents=True, exist_ok=True)
    path, n = base, 1
    while True:
        # mkdir either creates the folder or fails: two runs started at once (same second, same --out) each
        # claim their own, where an exists() check would let both pick the same name.
        try:
            path.mkdir()
            break
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")
    (path / "logs").mkdir()
    (path / RECORDS).touch()
    return path


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


@dataclass
class Run:
    path: Path
    manifest: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def run_id(self) -> str:
        return str(self.manifest["run_id"])

    def prompt_frame(self) -> pd.DataFrame:
        rows = [r for r in self.records if r.get("type") == "prompt"]
        return pd.DataFrame(rows, columns=[*PROMPT_COLUMNS, "per_request", "output_head"] if not rows else None)

    def cell_starts(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("type") == "cell_start"]


def _check_schema(where: str, value: Any) -> None:
    if value != SCHEMA_VERSION:
        raise UserError(
            f"{where}: schema version {value!r} is not supported by mtpbench {__version__} "
            f"(reads version {SCHEMA_VERSION})"
        )


def read_records(path: Path) -> list[dict[str, Any]]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: records file not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read records: {exc}") from None
    out: list[dict[str, Any]] = []
    lines = raw.split(b"\n")
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            truncated = n == len(lines) and not raw.endswith(b"\n")
            what = "truncated last line (a write was cut off)" if truncated else "corrupt JSON"
            raise UserError(f"{path}:{n}: {what}") from None
        if not isinstance(rec, dict) or "type" not in rec:
            raise UserError(f"{path}:{n}: not a mtpbench record (no 'type')")
        _check_schema(f"{path}:{n}", rec.get("schema"))
        if rec["type"] == "prompt":
            missing = [c for c in ("cell", "num_drafts", "accepted_per_pos") if c not in rec]
            if missing:
                raise UserError(f"{path}:{n}: prompt record lacks {missing[0]!r}")
        out.append(rec)
    return out


def load_run(path: str | Path) -> Run:
    p = Path(path)
    if p.is_file() and p.name in (MANIFEST, RECORDS):
        p = p.parent
    mpath = p / MANIFEST
    if not p.exists():
        raise UserError(f"{p}: no such run folder")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{p}: not a mtpbench run (no {MANIFEST})") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise UserError(f"{mpath}: unreadable manifest: {exc}") from None
    if not isinstance(manifest, dict):
        raise UserError(f"{mpath}: unreadable manifest: not a JSON object")
    _check_schema(str(mpath), manifest.get("schema"))
    for key in ("run_id", "config", "prompts", "cells"):
        if key not in manifest:
            raise UserError(f"{mpath}: manifest lacks {key!r}")
    return Run(p, manifest, current_attempts(read_records(p / RECORDS), manifest["cells"]))


def current_attempts(records: list[dict[str, Any]], cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Only the records of each repeat's current attempt (the manifest's): a resumed run re-runs failed or
    interrupted repeats as a new attempt, and the records an earlier attempt left must not count twice.
    Records and manifest entries without an attempt (runs before resume existed) are attempt 1."""
    want = {(c.get("cell"), c.get("repeat")): c.get("attempt", 1) for c in cells if isinstance(c, dict)}
    return [r for r in records if r.get("attempt", 1) == want.get((r.get("cell"), r.get("repeat")), 1)]


def timing(manifest: dict[str, Any]) -> dict[str, float]:
    """Where a run's wall time went: total over cell-repeats, engine start-up, and the rest (prompts)."""
    cells = manifest.get("cells", [])
    total = sum(float(c.get("wall_s") or 0.0) for c in cells)
    engine = sum(float(c.get("engine_start_s") or 0.0) for c in cells)
    return {"cells": float(len(cells)), "wall_s": total, "engine_start_s": engine, "other_s": max(total - engine, 0.0)}
