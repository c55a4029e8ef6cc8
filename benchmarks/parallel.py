"""Benchmark: the tiny config run serially, with --jobs 2, and on the Ray executor, on this machine.

Measures, for each executor/job count: the run's wall time, the time inside workers split into engine
start-up and generation, the executor's overhead per cell-repeat, and the speed-up over --jobs 1; checks
that the per-position counts are identical. One thread per worker: local workers get one CPU core each
(`--devices`), Ray workers one CPU (Ray sets OMP_NUM_THREADS=1). Writes benchmarks/reports/parallel.md
(and .json). A measurement, not a test: run it on a quiet machine and commit the report.

    python benchmarks/parallel.py [--repeats 4] [--no-ray]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mtpbench.config import load_config, load_prompts  # noqa: E402
from mtpbench.run import runner  # noqa: E402
from mtpbench.store.results import load_run  # noqa: E402


def config(tmp: Path, repeats: int, prompts: int, max_tokens: int) -> Path:
    cfg = load_config(REPO / "configs" / "tiny-gemma4-mtp.yaml")
    ps = load_prompts(cfg.prompts)
    (tmp / "prompts.yaml").write_text(
        yaml.safe_dump({"name": "coding", "prompts": [p.model_dump() for p in ps.prompts[:prompts]]})
    )
    data = cfg.model_dump(mode="json", exclude_none=True)
    data.update(
        name="tiny-bench",
        repeats=repeats,
        hash_seeds=list(range(repeats)),
        prompts=str(tmp / "prompts.yaml"),
        modes={"eager": {"enforce_eager": True}},
    )
    data["sampling"]["max_tokens"] = max_tokens
    data.pop("baseline", None)
    path = tmp / "tiny-bench.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def counts(run: Path) -> list[Any]:
    out: dict[tuple[str, int], list[int]] = {}
    for r in load_run(run).records:
        if r["type"] == "prompt":
            t = out.setdefault((r["cell"], r["repeat"]), [0, 0, 0, 0])
            t[0] += r["num_drafts"]
            for i, a in enumerate(r["accepted_per_pos"]):
                t[1 + i] += a
    return sorted([list(k), v] for k, v in out.items())


def measure(path: Path, out: Path, **opts: Any) -> dict[str, Any]:
    cfg = load_config(path)
    t0 = time.monotonic()
    outcome = runner.execute(
        cfg, load_prompts(cfg.prompts), out, str(path), runner.expand(cfg), options=runner.RunOptions(**opts)
    )
    total = time.monotonic() - t0
    assert not outcome.failed, outcome.manifest["cells"]
    cells = outcome.manifest["cells"]
    session = outcome.manifest["sessions"][-1]
    tb = runner.time_breakdown(outcome.manifest)
    n = len(cells)
    if opts.get("executor") == "ray":
        # Ray's share: submit, schedule, start the task's process, ship results back (per task).
        overhead = sum(c["ray_wall_s"] - c["wall_s"] for c in cells) / n
    else:
        # Local: per device slot, the gaps between one worker's exit and the next one's start (joining,
        # manifest writes, scheduling) and before the first: time the executor, not a worker, spent.
        gaps: list[float] = []
        for slot in {",".join(c["devices"] or ["-"]) for c in cells}:
            mine = sorted((c for c in cells if ",".join(c["devices"] or ["-"]) == slot), key=lambda c: c["queued_s"])
            end = 0.0
            for c in mine:
                gaps.append(c["queued_s"] - end)
                end = c["queued_s"] + c["wall_s"]
        overhead = sum(gaps) / n
    return {
        "executor": opts.get("executor", "local"),
        "jobs": opts.get("jobs", 1),
        "cells": n,
        "wall_s": round(total, 2),
        "session_wall_s": session["wall_s"],
        "worker_s": round(tb["worker_s"], 2),
        "startup_s": round(tb["startup_s"], 2),
        "engine_start_s": round(tb["engine_start_s"], 2),
        "generation_s": round(tb["generation_s"], 2),
        "overhead_per_cell_s": round(overhead, 3),
        "counts": counts(outcome.path),
        "run": str(outcome.path),
    }


def start_ray(tmp: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp / "ray.log"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ray"),
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--block",
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    while "Ray runtime started" not in log.read_text():
        if proc.poll() is not None:
            raise SystemExit(log.read_text()[-2000:])
        time.sleep(0.5)
    return proc, f"127.0.0.1:{port}", time.monotonic() - t0


def stop_ray(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def report(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    base = results[0]["wall_s"]
    lines = [
        "# Parallel executors on the tiny pair (generated by benchmarks/parallel.py)",
        "",
        f"Machine: {meta['cpus']} CPU cores ({meta['cpu']}), {meta['platform']}; load average "
        f"{meta['load_before']} before, {meta['load_after']} after (other jobs shared the cores).",
        f"Matrix: tiny-gemma4-mtp, eager, {meta['repeats']} repeats × {meta['prompts']} coding prompts × "
        f"{meta['max_tokens']} tokens; one thread per worker.",
        "",
        "| executor | jobs | wall s | speed-up | in workers s | start-up s (engine) | generation s | "
        "executor overhead / cell-repeat s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['executor']} | {r['jobs']} | {r['wall_s']:.1f} | {base / r['wall_s']:.2f}× | {r['worker_s']:.1f} | "
            f"{r['startup_s']:.1f} ({r['engine_start_s']:.1f}) | {r['generation_s']:.1f} | "
            f"{r['overhead_per_cell_s']:.2f} |"
        )
    same = all(r["counts"] == results[0]["counts"] for r in results)
    lines += ["", f"Per-position counts identical across all runs: **{'yes' if same else 'NO'}**."]
    if "ray_start_s" in meta:
        lines.append(
            f"Ray: cluster start {meta['ray_start_s']:.1f} s (once per cluster, not counted above); "
            "the first task on a fresh cluster also pays Ray's worker start-up and the upload of the "
            "mtpbench package (py_modules), included in its overhead."
        )
    lines += ["", "## What limits the speed-up", "", *meta["notes"], ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=5, help="first N prompts of the coding set")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mtpbench-bench-"))
    path = config(tmp, args.repeats, args.prompts, args.max_tokens)
    meta: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "repeats": args.repeats,
        "prompts": args.prompts,
        "max_tokens": args.max_tokens,
        "cpu": platform.processor() or platform.machine(),
        "load_before": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }
    results = [measure(path, tmp / "j1", jobs=1, devices=["0"])]
    results.append(measure(path, tmp / "j2", jobs=2, devices=["0", "1"]))
    if not args.no_ray:
        proc, address, meta["ray_start_s"] = start_ray(tmp)
        try:
            results.append(measure(path, tmp / "ray", jobs=2, executor="ray", address=address, ray_resource="CPU"))
        finally:
            stop_ray(proc)
    meta["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    j1, j2 = results[0], results[1]
    meta["notes"] = [
        f"- Two workers share two cores: generation does not get faster per worker, it overlaps "
        f"({j1['generation_s']:.1f} s of generation in total at --jobs 1, {j2['generation_s']:.1f} s at --jobs 2).",
        f"- Each cell-repeat is a fresh process that imports vLLM and torch and starts an engine: "
        f"{j1['startup_s'] / j1['cells']:.1f} s of {j1['worker_s'] / j1['cells']:.1f} s per cell-repeat at --jobs 1 "
        "is start-up, and imports are disk- and CPU-bound, so two at once contend for the same cores.",
        "- With an even number of cell-repeats per slot the pool stays full; an odd count leaves one slot idle "
        "for the last cell-repeat.",
        "- On a shared machine other processes take CPU time: compare the load averages above.",
    ]
    (REPO / "benchmarks" / "reports" / "parallel.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=1)
    )
    text = report(results, meta)
    (REPO / "benchmarks" / "reports" / "parallel.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
