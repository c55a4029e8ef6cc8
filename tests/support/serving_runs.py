"""Serving runs written in the on-disk format: the per-request counts and /metrics deltas a serving cell
records (shared by the serving and evidence-agreement tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mtpbench.schema import SCHEMA_VERSION
from mtpbench.store.manifest import MANIFEST, new_manifest
from mtpbench.store.records import RECORDS


def request_record(cell: str, i: int, per_pos: list[int], drafts: int, **extra: Any) -> dict[str, Any]:
    build, mode, variant = cell.split("/")
    return {
        "schema": SCHEMA_VERSION,
        "run_id": "R",
        "cell": cell,
        "build": build,
        "mode": mode,
        "variant": variant,
        "repeat": 0,
        "hash_seed": 0,
        "type": "prompt",
        "prompt_id": f"p{i % 3}#{i}",
        "base_prompt_id": f"p{i % 3}",
        "prompt_index": i,
        "workload": "serving",
        "num_drafts": drafts,
        "num_draft_tokens": 3 * drafts,
        "num_accepted_tokens": sum(per_pos),
        "accepted_per_pos": per_pos,
        "num_generated_tokens": 64,
        "output_sha256": f"sha{i % 3}",
        "ttft_s": 0.1 + 0.001 * i,
        "tpot_s": 0.02,
        "e2e_s": 1.0 + 0.01 * i,
        "itl_s": [0.05, 0.06],
        "wall_s": 1.0,
        **extra,
    }


def write_serving_run(
    root: Path,
    cells: dict[str, list[tuple[list[int], int]]],
    *,
    failed: int = 0,
    total: int | None = None,
    mismatch: bool = False,
    concurrency: int = 16,
    wall_s: float = 10.0,
) -> Path:
    """cells: "build/mode/variant" -> per request (accepted_per_pos, drafts); one repeat each."""
    path = root / "R"
    path.mkdir(parents=True)
    n = max(len(v) for v in cells.values())
    config = {
        "name": "s",
        "model": "m",
        "speculative": {"method": "mtp", "model": "d", "num_speculative_tokens": 3, "extra": {}},
        "sampling": {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_tokens": 64, "ignore_eos": True},
        "modes": {},
        "gate": {},
        "workload": {
            "kind": "serving",
            "concurrency": concurrency,
            "num_requests": total or n,
            "request_rate": None,
            "max_tokens": 64,
            "warmup_requests": 0,
            "throughput_tolerance_pct": 20.0,
            "fail_on_throughput_drop": False,
        },
    }
    manifest = new_manifest("R", config, "s.yaml", {"name": "p", "sha256": "ab" * 32, "ids": ["p0", "p1", "p2"]})
    recs: list[dict[str, Any]] = []
    for cell, reqs in cells.items():
        build, mode, variant = cell.split("/")
        manifest["cells"].append(
            {
                "cell": cell,
                "build": build,
                "mode": mode,
                "variant": variant,
                "repeat": 0,
                "hash_seed": 0,
                "status": "ok",
            }
        )
        base = {
            "schema": SCHEMA_VERSION,
            "run_id": "R",
            "cell": cell,
            "build": build,
            "mode": mode,
            "variant": variant,
            "repeat": 0,
            "hash_seed": 0,
        }
        recs.append(
            {
                **base,
                "type": "cell_start",
                "requested": {"enforce_eager": mode == "eager"},
                "effective": {"cudagraph_mode": "NONE"},
                "patches": [],
            }
        )
        for i, (per_pos, drafts) in enumerate(reqs[: len(reqs) - failed]):
            recs.append(request_record(cell, i, per_pos, drafts))
        for i in range(len(reqs) - failed, len(reqs)):
            recs.append({**base, "type": "request_failed", "prompt_id": f"p0#{i}", "error": "HTTP 500: boom"})
        summed = {
            "num_drafts": sum(d for _, d in reqs[: len(reqs) - failed]),
            "num_draft_tokens": 3 * sum(d for _, d in reqs[: len(reqs) - failed]),
            "num_accepted_tokens": sum(sum(p) for p, _ in reqs[: len(reqs) - failed]),
            "accepted_per_pos": [sum(p[i] for p, _ in reqs[: len(reqs) - failed]) for i in range(3)],
        }
        delta = {**summed, "num_drafts": summed["num_drafts"] + 1} if mismatch else summed
        recs.append(
            {
                **base,
                "type": "load",
                "requests_total": total or n,
                "requests_ok": len(reqs) - failed,
                "requests_failed": failed,
                "wall_s": wall_s,
                "server_died": False,
                "metrics_delta": delta,
                "per_request_sum": summed,
                "counts_match": delta == summed,
            }
        )
    (path / MANIFEST).write_text(json.dumps(manifest))
    (path / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


GOOD = [([9, 8, 7], 10), ([10, 9, 8], 10), ([8, 6, 5], 10), ([9, 9, 9], 10)]


def write_sweep_run(
    root: Path,
    by_level: dict[int, list[tuple[list[int], int]]],
    cell: str = "current/eager/stock",
    wall_s: float = 10.0,
    prompts: int = 3,
) -> Path:
    """A serving run of `workload.concurrency: [levels]` as engine/serving.py writes it: one cell-repeat whose
    levels ran one after another, each request record carrying its level and an id naming it, one load record
    per level. by_level: level -> per request (accepted_per_pos, drafts), prompts p0..p{prompts-1} round-robin."""
    path = write_serving_run(root, {cell: next(iter(by_level.values()))}, wall_s=wall_s)
    manifest = json.loads((path / MANIFEST).read_text())
    n = max(len(v) for v in by_level.values())
    manifest["config"]["workload"] |= {"concurrency": list(by_level), "num_requests": n}
    recs = [json.loads(line) for line in (path / RECORDS).read_text().splitlines()]
    # keep the cell_start; the requests and loads are the sweep's
    recs = [r for r in recs if r["type"] == "cell_start"]
    for level, reqs in by_level.items():
        for i, (per_pos, drafts) in enumerate(reqs):
            ids = {"prompt_id": f"p{i % prompts}#c{level}#{i}", "base_prompt_id": f"p{i % prompts}"}
            recs.append(request_record(cell, i, per_pos, drafts, concurrency=level, **ids))
        summed = {
            "num_drafts": sum(d for _, d in reqs),
            "num_draft_tokens": 3 * sum(d for _, d in reqs),
            "num_accepted_tokens": sum(sum(p) for p, _ in reqs),
            "accepted_per_pos": [sum(p[i] for p, _ in reqs) for i in range(3)],
        }
        base = {k: recs[0][k] for k in ("schema", "run_id", "cell", "build", "mode", "variant", "repeat", "hash_seed")}
        recs.append(
            {
                **base,
                "type": "load",
                "requests_total": n,
                "requests_ok": len(reqs),
                "requests_failed": 0,
                "wall_s": wall_s,
                "server_died": False,
                "metrics_delta": summed,
                "per_request_sum": summed,
                "counts_match": True,
                "concurrency": level,
            }
        )
    (path / MANIFEST).write_text(json.dumps(manifest))
    (path / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path
