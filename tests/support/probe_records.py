"""Binding-probe records added to a written run, as the engine's metadata-binding probe records them
(shared by the binding and selftest tests)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

FULL = ["draft_model.layers.0.self_attn.attn", "draft_model.layers.3.self_attn.attn"]


SLIDING = ["draft_model.layers.1.self_attn.attn", "draft_model.layers.2.self_attn.attn"]
GROUPS = [(4, "full_attention", FULL), (3, "sliding_attention", SLIDING)]


def snapshot(reads: dict[str, str], proposes: int = 3, k: int = 3) -> dict[str, Any]:
    return {
        "probe": "metadata-binding",
        "proposes": proposes,
        "groups": [{"id": gid, "type": kind, "layers": layers} for gid, kind, layers in GROUPS],
        "layers": {
            name: {
                "own_group": 4 if name in FULL else 3,
                "type": "full_attention" if name in FULL else "sliding_attention",
                "steps": [{reads[name]: proposes}] * k if proposes else [],
            }
            for name in FULL + SLIDING
        },
    }


OWN = {**dict.fromkeys(FULL, "4"), **dict.fromkeys(SLIDING, "3")}


ALL_FULL = dict.fromkeys(FULL + SLIDING, "4")


ALL_SLIDING = dict.fromkeys(FULL + SLIDING, "3")


def add_probe_records(path: Path, snap_for: Callable[[dict[str, Any]], dict[str, Any] | None]) -> Path:
    """Give a synthetic run (synthetic_runs.write_run) the probe: applied in every cell_start, and a cell_end per
    repeat holding `snap_for(cell_start)` (None: no cell_end, as after a crash). A fault cell also applied
    flatten-draft-metadata."""
    lines = [json.loads(x) for x in (path / "records.jsonl").read_text().splitlines()]
    out = []
    for rec in lines:
        out.append(rec)
        if rec["type"] != "cell_start":
            continue
        faults = ["flatten-draft-metadata"] if rec["variant"] == "fault" else []
        rec["patches"] = [{"name": p, "status": "applied", "detail": ""} for p in [*faults, "metadata-binding"]]
        snap = snap_for(rec)
        if snap is not None:
            keys = ("schema", "run_id", "cell", "build", "mode", "variant", "repeat", "hash_seed")
            out.append(
                {**{k: rec[k] for k in keys}, "type": "cell_end", "patch_observations": {"metadata-binding": snap}}
            )
    (path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))
    return path


def faulty_by_seed(rec: dict[str, Any]) -> dict[str, Any]:
    """Stock bound correctly; the fault bound to the full group under seed 0, the sliding one otherwise."""
    if rec["variant"] != "fault":
        return snapshot(OWN)
    return snapshot(ALL_FULL if rec["hash_seed"] == 0 else ALL_SLIDING)
