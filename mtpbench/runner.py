"""Expand a config into cell-repeats and run each in a fresh subprocess of its build's interpreter.

A cell is build × mode × variant; each of its repeats is one process with its own PYTHONHASHSEED (the
knob that exposes set/dict-iteration-order bugs) and the engine in-process. The runner writes the job
file, starts `python -m mtpbench.worker`, streams the worker's events to a callback (the CLI draws the
progress bar from them; nothing here prints), keeps the engine's log per cell, enforces the timeout and
records every cell's outcome in the manifest as it happens. A failed cell does not stop the others.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mtpbench
from mtpbench.baseline import model_identity
from mtpbench.config import ExperimentConfig, PromptSet
from mtpbench.errors import ExitCode
from mtpbench.patches import PATCHES_ENV
from mtpbench.results import MANIFEST, RECORDS, new_manifest, new_run_dir, now_iso, write_json_atomic
from mtpbench.worker import EVENT_PREFIX

EventCallback = Callable[[str, dict[str, Any]], None]
SRC_ROOT = Path(mtpbench.__file__).resolve().parent.parent


@dataclass(frozen=True)
class Cell:
    build: str
    mode: str
    variant: str
    repeat: int
    hash_seed: int

    @property
    def cell_id(self) -> str:
        return f"{self.build}/{self.mode}/{self.variant}"

    @property
    def slug(self) -> str:
        return f"{self.build}-{self.mode}-{self.variant}-r{self.repeat}".replace("/", "_")


@dataclass
class CellPlan:
    cell: Cell
    python: str
    env: dict[str, str]  # only what mtpbench and the build add to the inherited environment
    job: dict[str, Any]

    def command(self, job_path: str = "JOB.json") -> list[str]:
        return [self.python, "-m", "mtpbench.worker", job_path]


@dataclass
class RunOutcome:
    path: Path
    manifest: dict[str, Any]
    failed: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.RUN_FAILED if self.failed else ExitCode.OK


def engine_args_for(cfg: ExperimentConfig, mode: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The vllm.LLM kwargs of one mode, and what was requested of graphs/compilation (for the record)."""
    spec = cfg.modes[mode]
    args: dict[str, Any] = {**cfg.engine_args, **spec.engine_args}
    if cfg.tokenizer:
        args.setdefault("tokenizer", cfg.tokenizer)
    if spec.enforce_eager is not None:
        args["enforce_eager"] = spec.enforce_eager
    cc: dict[str, Any] = {**(args.get("compilation_config") or {}), **spec.compilation_config}
    if spec.cudagraph_mode is not None:
        cc["cudagraph_mode"] = spec.cudagraph_mode
    if cc:
        args["compilation_config"] = cc
    else:
        args.pop("compilation_config", None)
    requested = {
        "cudagraph_mode": cc.get("cudagraph_mode"),
        "compilation_mode": cc.get("mode", cc.get("level")),
        "enforce_eager": bool(args.get("enforce_eager", False)),
    }
    return args, requested


def expand(
    cfg: ExperimentConfig, only_modes: list[str] | None = None, only_builds: list[str] | None = None
) -> list[Cell]:
    seeds = cfg.seeds()
    cells: list[Cell] = []
    for b in cfg.builds:
        if only_builds and b not in only_builds:
            continue
        for m in cfg.modes:
            if only_modes and m not in only_modes:
                continue
            for v in cfg.variants:
                for r in range(cfg.repeats):
                    cells.append(Cell(b, m, v, r, seeds[r]))
    return cells


def plan(
    cfg: ExperimentConfig, prompts: PromptSet, cells: list[Cell], run_id: str, records_path: str
) -> list[CellPlan]:
    plans: list[CellPlan] = []
    sampling = cfg.sampling.model_dump(exclude_none=True)
    for c in cells:
        build = cfg.builds[c.build]
        engine_args, requested = engine_args_for(cfg, c.mode)
        patches = cfg.variants[c.variant]
        pythonpath = os.pathsep.join(p for p in (str(SRC_ROOT), build.env.get("PYTHONPATH", "")) if p)
        env = {
            **build.env,
            "PYTHONHASHSEED": str(c.hash_seed),
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "PYTHONPATH": pythonpath,
            # Always set, even empty: a user's own MTPBENCH_PATCHES must not leak into a stock cell.
            PATCHES_ENV: ",".join(patches),
        }
        job = {
            "run_id": run_id,
            "cell": c.cell_id,
            "build": c.build,
            "mode": c.mode,
            "variant": c.variant,
            "repeat": c.repeat,
            "hash_seed": c.hash_seed,
            "model": cfg.model,
            "speculative_config": cfg.speculative.to_vllm(),
            "engine_args": engine_args,
            "requested": requested,
            "sampling": sampling,
            "patches": patches,
            "prompts": [p.model_dump() for p in prompts.prompts],
            "records_path": records_path,
            # offline | serving (mtpbench/serving.py); the worker dispatches on its kind.
            "workload": cfg.workload.model_dump(mode="json"),
        }
        plans.append(CellPlan(c, build.python or sys.executable, env, job))
    return plans


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def _run_one(p: CellPlan, run_dir: Path, timeout_s: float, on_event: EventCallback) -> dict[str, Any]:
    job_path = run_dir / "jobs" / f"{p.cell.slug}.json"
    job_path.parent.mkdir(exist_ok=True)
    job_path.write_text(json.dumps(p.job, indent=1))
    log_path = run_dir / "logs" / f"{p.cell.slug}.log"
    env = {**os.environ, **p.env}
    entry: dict[str, Any] = {"log": str(log_path.relative_to(run_dir)), "error": None}
    last_error: list[str] = []
    t0 = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.Popen(
                p.command(str(job_path)), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            entry.update(status="failed", error=f"cannot start {p.python}: {exc}", wall_s=0.0)
            return entry

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(EVENT_PREFIX):
                    try:
                        ev = json.loads(line[len(EVENT_PREFIX) :])
                    except json.JSONDecodeError:
                        continue
                    if ev.get("event") == "error":
                        last_error.append(str(ev.get("error")))
                    if ev.get("event") == "engine_ready":
                        entry["engine_start_s"] = round(float(ev.get("engine_start_s", 0.0)), 3)
                    on_event(str(ev.pop("event")), {"cell": p.cell, **ev})
                log.write(line)
                log.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            reader.join(timeout=5)
            entry.update(status="interrupted", error="interrupted (Ctrl-C)", wall_s=round(time.perf_counter() - t0, 3))
            raise _Interrupted(entry) from None
        reader.join(timeout=10)
    entry["wall_s"] = round(time.perf_counter() - t0, 3)
    if rc == 0:
        entry["status"] = "ok"
    elif rc is None:
        entry.update(status="timeout", error=f"timed out after {timeout_s:g} s\n{_tail(log_path)}")
    else:
        head = last_error[0] if last_error else f"worker exited with code {rc}"
        entry.update(status="failed", error=f"{head}\n{_tail(log_path)}")
    return entry


class _Interrupted(Exception):
    def __init__(self, entry: dict[str, Any]) -> None:
        super().__init__("interrupted")
        self.entry = entry


def execute(
    cfg: ExperimentConfig,
    prompts: PromptSet,
    out_dir: Path,
    config_path: str,
    cells: list[Cell],
    on_event: EventCallback = lambda kind, payload: None,
) -> RunOutcome:
    run_dir = new_run_dir(out_dir, cfg.name)
    manifest = new_manifest(
        run_dir.name,
        cfg.model_dump(mode="json"),
        config_path,
        {"name": prompts.name, "sha256": prompts.sha256(), "ids": [p.id for p in prompts.prompts]},
    )
    # How the run was asked for, so a baseline saved from it says how to reproduce it.
    manifest["command"] = " ".join(["mtpbench", *sys.argv[1:]]) if sys.argv[0].endswith("mtpbench") else None
    # Identity of the weights, not their path: a baseline saved on one machine matches a run on another.
    manifest["model"] = model_identity(cfg.model)
    manifest["drafter"] = model_identity(cfg.speculative.model)
    plans = plan(cfg, prompts, cells, run_dir.name, str((run_dir / RECORDS).resolve()))
    manifest["cells"] = [
        {"cell": pl.cell.cell_id, "build": pl.cell.build, "mode": pl.cell.mode, "variant": pl.cell.variant,
         "repeat": pl.cell.repeat, "hash_seed": pl.cell.hash_seed, "status": "pending"}
        for pl in plans
    ]  # fmt: skip
    mpath = run_dir / MANIFEST
    write_json_atomic(mpath, manifest)
    on_event("run_start", {"path": run_dir, "cells": len(plans), "prompts": len(prompts.prompts)})
    failed: list[str] = []
    for i, pl in enumerate(plans):
        manifest["cells"][i]["status"] = "running"
        write_json_atomic(mpath, manifest)
        on_event("cell_start", {"cell": pl.cell, "index": i})
        try:
            entry = _run_one(pl, run_dir, cfg.timeout_s, on_event)
        except _Interrupted as intr:
            manifest["cells"][i].update(intr.entry)
            manifest.update(status="interrupted", finished=now_iso())
            write_json_atomic(mpath, manifest)
            raise KeyboardInterrupt from None
        manifest["cells"][i].update(entry)
        if entry["status"] != "ok":
            failed.append(f"{pl.cell.cell_id} r{pl.cell.repeat}")
        write_json_atomic(mpath, manifest)
        on_event("cell_end", {"cell": pl.cell, "index": i, **entry})
    manifest.update(status="failed" if failed else "complete", finished=now_iso())
    write_json_atomic(mpath, manifest)
    return RunOutcome(run_dir, manifest, failed)
