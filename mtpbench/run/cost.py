"""What a run costs: where a finished run's time went, and the wall time of a planned one estimated from
earlier runs of the same config."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtpbench.config import ExperimentConfig
from mtpbench.run.cells import Cell
from mtpbench.schema import CellStatus
from mtpbench.store.manifest import MANIFEST


def time_breakdown(manifest: dict[str, Any]) -> dict[str, float]:
    """Where a run's time went: wall time of its sessions; per cell-repeat sums of engine start-up,
    generation, process overhead and time queued for a device; device-slot utilisation."""
    cells = [c for c in manifest.get("cells", []) if isinstance(c, dict) and c.get("wall_s") is not None]
    sessions = manifest.get("sessions") or []
    wall = sum(float(s.get("wall_s") or 0.0) for s in sessions)
    slot_s = sum(float(s.get("wall_s") or 0.0) * int(s.get("jobs") or 1) for s in sessions)
    worker = sum(float(c.get("wall_s") or 0.0) for c in cells)
    startup = sum(float(c.get("startup_s") or 0.0) for c in cells)
    engine = sum(float(c.get("engine_start_s") or 0.0) for c in cells)
    gen = sum(float(c.get("generation_s") or 0.0) for c in cells)
    queued = [float(c.get("queued_s") or 0.0) for c in cells]
    return {
        "cells": float(len(cells)),
        "run_wall_s": wall,
        "worker_s": worker,
        "startup_s": startup,
        "engine_start_s": engine,
        "generation_s": gen,
        "exit_s": max(worker - startup - gen, 0.0),  # process overhead: what start-up and generation leave
        # Summed over cell-repeats (the benchmarks' figure); the run's own summary gives the longest and the
        # mean wait, which stay within the wall time.
        "queued_s": sum(queued),
        "queued_max_s": max(queued, default=0.0),
        "queued_mean_s": sum(queued) / len(queued) if queued else 0.0,
        "utilisation": worker / slot_s if slot_s else 0.0,
        # The most cell-repeats any session ran at once: 1 means one after another, where a cell-repeat's
        # wait is the time of those before it, not a shortage of devices.
        "slots": float(max((int(s.get("jobs") or 1) for s in sessions), default=1)),
    }


@dataclass
class Estimate:
    wall_s: float
    runs: int  # earlier runs the figures came from
    per_cell_s: dict[str, float]
    slots: int


def estimate(cfg: ExperimentConfig, cells: list[Cell], out_dir: Path, jobs: int, executor: str) -> Estimate | None:
    """The matrix's wall time from earlier runs of the same config in `out_dir`: mean worker time per
    cell (over finished repeats; cells never seen take the mean of all), list-scheduled over `jobs`
    slots in run order. None when there is nothing to go by."""
    seen: dict[str, list[float]] = {}
    overhead: list[float] = []
    runs = 0
    for mpath in sorted(out_dir.glob(f"*/{MANIFEST}")) if out_dir.is_dir() else []:
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if not isinstance(manifest, dict) or (manifest.get("config") or {}).get("name") != cfg.name:
            continue
        got = [
            c
            for c in manifest.get("cells", [])
            if isinstance(c, dict) and c.get("status") == CellStatus.OK and c.get("wall_s")
        ]
        runs += bool(got)
        for c in got:
            seen.setdefault(str(c.get("cell")), []).append(float(c["wall_s"]))
            if c.get("ray_wall_s"):
                overhead.append(float(c["ray_wall_s"]) - float(c["wall_s"]))
    if not seen:
        return None
    per = {k: sum(v) / len(v) for k, v in seen.items()}
    mean_all = sum(per.values()) / len(per)
    extra = (sum(overhead) / len(overhead)) if executor == "ray" and overhead else 0.0
    slots = [0.0] * max(jobs, 1)
    for c in cells:
        k = slots.index(min(slots))
        slots[k] += per.get(c.cell_id, mean_all) + extra
    return Estimate(wall_s=max(slots), runs=runs, per_cell_s=per, slots=len(slots))
