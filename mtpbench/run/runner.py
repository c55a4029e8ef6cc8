"""Run a config's cell-repeats, each in a fresh subprocess of its build's interpreter: the run stage's entry
point (its public names are listed in __all__: the matrix from cells.py, steering from control.py, cost
from cost.py, execution here).

A cell is build × mode × variant; each of its repeats is one process with its own PYTHONHASHSEED (the
knob that exposes set/dict-iteration-order bugs) and the engine in-process. The runner writes the job
file, starts `python -m mtpbench.engine.worker`, streams the worker's events to a callback (the CLI draws the
progress bar from them; nothing here prints), keeps the engine's log per cell, enforces the timeout and
records every cell's outcome in the manifest as it happens. A failed cell does not stop the others.
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtpbench.config import ExperimentConfig, PromptSet
from mtpbench.errors import UserError
from mtpbench.run.cells import Cell, CellPlan, RunOutcome, engine_args_for, expand, plan
from mtpbench.run.control import LOCK, RERUN, STOP_SIGNALS, RunInterrupted, RunOptions, StopSignals
from mtpbench.run.cost import Estimate, estimate, time_breakdown
from mtpbench.run.devices import VISIBILITY_ENV, DevicePool, binding_env, detect, devices_needed, probe_platform
from mtpbench.run.executors import LocalExecutor, RayExecutor, WorkerSpec, make_executor
from mtpbench.run.raycluster import RayDeadlines, RaySettings
from mtpbench.store.baseline import model_identity
from mtpbench.store.manifest import MANIFEST, new_manifest, new_run_dir, now_iso, write_json_atomic
from mtpbench.store.records import RECORDS
from mtpbench.store.results import refresh_copy

EventCallback = Callable[[str, dict[str, Any]], None]


@dataclass
class _Setup:
    jobs: int
    executor: str
    pool: DevicePool | None
    bind_env: dict[str, str | None]  # build -> visibility variable
    need: list[int]
    devices_from: str
    ray_resource: str | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "executor": self.executor,
            "jobs": self.jobs,
            "devices": self.pool.devices if self.pool else None,
            "devices_from": self.devices_from,
            "device_env": self.bind_env,
            "ray_resource": self.ray_resource,
        }


def _setup(cfg: ExperimentConfig, cells: list[Cell], opts: RunOptions) -> _Setup:
    """Jobs, devices and their binding, checked before a run folder is made (a bad pool is bad input)."""
    jobs = opts.jobs or cfg.jobs
    executor = opts.executor or cfg.executor
    need = [devices_needed(engine_args_for(cfg, c.mode)[0]) for c in cells]
    explicit = opts.devices or cfg.devices
    first = next(iter(cfg.builds.values()))
    if executor == "ray":
        resource = opts.ray_resource or cfg.ray_resource
        if resource is None:
            kind = probe_platform(first.python)["platform"]
            resource = {"cuda": "GPU", "ascend": "NPU"}.get(kind, "CPU")
        return _Setup(jobs, executor, None, {b: None for b in cfg.builds}, need, "assigned by Ray", resource.upper())
    if jobs == 1 and not explicit:
        # One worker at a time on whatever the environment shows it: the behaviour before device pools.
        return _Setup(1, executor, None, {b: None for b in cfg.builds}, need, "not bound (one job)")
    kinds = {b: probe_platform(spec.python)["platform"] for b, spec in cfg.builds.items()}
    bind = {b: spec.device_env or VISIBILITY_ENV[kinds[b]] for b, spec in cfg.builds.items()}
    if explicit:
        devices, source = [str(d) for d in explicit], "--devices" if opts.devices else "the config's devices"
    else:
        devices, source = detect(kinds[next(iter(cfg.builds))], first.python, jobs)
    too_big = [(c, n) for c, n in zip(cells, need, strict=True) if n > len(devices)]
    if too_big:
        c, n = too_big[0]
        raise UserError(f"{c.cell_id}: needs {n} devices (tensor × pipeline parallel), pool: {len(devices)}")
    return _Setup(jobs, executor, DevicePool(devices), bind, need, source)


def _executor(
    cfg: ExperimentConfig,
    cells: list[Cell],
    opts: RunOptions,
    setup: _Setup,
    stops: StopSignals,
    todo: list[int] | None = None,
) -> LocalExecutor | RayExecutor:
    """The executor, before anything runs: for Ray, the cluster started or reached, every cell-repeat checked
    to fit one of its nodes and mtpbench shipped, each within its deadline (a stop signal ends the waits)."""
    ray = RaySettings(
        opts.address or cfg.ray_address,
        setup.ray_resource or "GPU",
        RayDeadlines.from_config(cfg),
        [
            (f"{cells[i].cell_id} r{cells[i].repeat}", setup.need[i])
            for i in (range(len(cells)) if todo is None else todo)
        ],
        stops.caught,
    )
    executor = make_executor(setup.executor, ray)
    stops.rearm()
    return executor


def _lock(run_dir: Path) -> int:
    """One mtpbench at a time per run folder (a resume must not race a run still going)."""
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise UserError(f"{run_dir}: in use by another mtpbench (pid {holder}); wait for it or stop it") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _spec(p: CellPlan, run_dir: Path, cfg: ExperimentConfig, devices: list[str], var: str | None) -> WorkerSpec:
    attempt = int(p.job.get("attempt", 1))
    name = p.cell.slug if attempt == 1 else f"{p.cell.slug}-a{attempt}"
    job_path = run_dir / "jobs" / f"{name}.json"
    return WorkerSpec(
        command=p.command(str(job_path)),
        env={**p.env, **binding_env(var, devices)},
        job=p.job,
        job_path=str(job_path),
        log_path=str(run_dir / "logs" / f"{name}.log"),
        startup_timeout_s=cfg.startup_timeout_s or cfg.timeout_s,
        generation_timeout_s=cfg.generation_timeout_s or cfg.timeout_s,
        devices=devices,
    )


def _schedule(
    cfg: ExperimentConfig,
    plans: list[CellPlan],
    todo: list[int],
    manifest: dict[str, Any],
    run_dir: Path,
    setup: _Setup,
    executor: LocalExecutor | RayExecutor,
    on_event: EventCallback,
    caught: list[int],
) -> list[str]:
    """Run the cell-repeats `todo` (indices into plans and manifest cells) on the executor; returns the
    failed ones. Runs in the main thread: signal handlers only note the signal, this loop stops the
    workers, so no handler ever runs between starting a worker and knowing about it."""
    mpath = run_dir / MANIFEST
    session: dict[str, Any] = {"started": now_iso(), "cells": len(todo), **setup.describe()}
    manifest.setdefault("sessions", []).append(session)
    write_json_atomic(mpath, manifest)
    stop = threading.Event()
    events: queue.Queue[tuple[str, int, dict[str, Any]]] = queue.Queue()
    pending = list(todo)
    active: dict[int, tuple[threading.Thread, list[str]]] = {}
    failed: list[str] = []
    t_start = time.monotonic()
    busy = 0.0

    ui_failed: list[str] = []

    def emit(kind: str, payload: dict[str, Any]) -> None:
        # The progress view writes to a terminal or pipe that may be gone (a CI runner killed our parent):
        # that must neither stop the run nor keep the manifest from saying how it ended.
        if not ui_failed:
            try:
                on_event(kind, payload)
            except Exception as exc:
                ui_failed.append(f"{type(exc).__name__}: {exc}")
                session["ui_error"] = ui_failed[0]

    def work(i: int, spec: WorkerSpec) -> None:
        entry: dict[str, Any]
        try:
            entry = executor.run(spec, stop, lambda ev: events.put(("event", i, ev)))
        except BaseException as exc:  # a bug or an executor failure ends this cell, not the run
            entry = {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "wall_s": 0.0}
        events.put(("done", i, entry))

    try:
        while pending or active:
            if caught and not stop.is_set():
                stop.set()
            if not stop.is_set():
                for i in list(pending):
                    if len(active) >= setup.jobs:
                        break
                    devs: list[str] | None = []
                    if setup.pool is not None:
                        devs = setup.pool.take(setup.need[i])
                        if devs is None:
                            continue
                    devs = devs or []
                    pending.remove(i)
                    pl = plans[i]
                    spec = _spec(pl, run_dir, cfg, devs, setup.bind_env.get(pl.cell.build))
                    if setup.executor == "ray":
                        spec.devices = [f"ray{j}" for j in range(setup.need[i])]
                    c = manifest["cells"][i]
                    c.update(
                        status="running",
                        attempt=int(pl.job.get("attempt", 1)),
                        devices=devs or None,
                        started=now_iso(),
                        queued_s=round(time.monotonic() - t_start, 3),
                        log=str(Path(spec.log_path).relative_to(run_dir)),
                    )
                    write_json_atomic(mpath, manifest)
                    th = threading.Thread(target=work, args=(i, spec), name=f"cell-{i}", daemon=True)
                    active[i] = (th, devs)
                    emit("cell_start", {"cell": pl.cell, "index": i, "seq": i, "devices": devs})
                    th.start()
            elif not active:
                break
            try:
                kind, i, data = events.get(timeout=0.1)
            except queue.Empty:
                continue
            c = manifest["cells"][i]
            if kind == "event":
                ev = dict(data)
                name = str(ev.pop("event"))
                if name == "spawned":
                    c["pid"] = ev.get("pid")
                    write_json_atomic(mpath, manifest)
                    continue
                if name == "engine_ready":
                    c["engine_start_s"] = round(float(ev.get("engine_start_s", 0.0)), 3)
                emit(name, {**ev, "cell": plans[i].cell, "seq": i})
                continue
            th, devs = active.pop(i)
            th.join()
            if setup.pool is not None:
                setup.pool.give_back(devs)
            c.update(data)
            c.pop("pid", None)
            busy += float(data.get("wall_s") or 0.0)
            if data["status"] != "ok":
                failed.append(f"{plans[i].cell.cell_id} r{plans[i].cell.repeat}")
            write_json_atomic(mpath, manifest)
            emit("cell_end", {**data, "cell": plans[i].cell, "index": i, "seq": i})
    except BaseException:
        # A bug here must not orphan a worker nor leave the run looking alive: stop all, say so, re-raise.
        stop.set()
        for th, _ in active.values():
            th.join()
        manifest.update(status="interrupted", finished=now_iso())
        write_json_atomic(mpath, manifest)
        raise
    finally:
        session.update(finished=now_iso(), wall_s=round(time.monotonic() - t_start, 3), busy_s=round(busy, 3))
    if caught:
        session["interrupted_by"] = signal.Signals(caught[0]).name
        manifest.update(status="interrupted", finished=now_iso())
        write_json_atomic(mpath, manifest)
        raise RunInterrupted(caught[0], run_dir)
    return failed


def execute(
    cfg: ExperimentConfig,
    prompts: PromptSet,
    out_dir: Path,
    config_path: str,
    cells: list[Cell],
    on_event: EventCallback = lambda kind, payload: None,
    options: RunOptions | None = None,
) -> RunOutcome:
    """Run the cell-repeats in a new run folder under `out_dir`; raises RunInterrupted on a stop signal."""
    with StopSignals() as stops:
        return _execute(cfg, prompts, out_dir, config_path, cells, on_event, options or RunOptions(), stops)


def _execute(
    cfg: ExperimentConfig,
    prompts: PromptSet,
    out_dir: Path,
    config_path: str,
    cells: list[Cell],
    on_event: EventCallback,
    opts: RunOptions,
    stops: StopSignals,
) -> RunOutcome:
    setup = _setup(cfg, cells, opts)
    executor = _executor(cfg, cells, opts, setup, stops)
    try:
        run_dir = new_run_dir(out_dir, cfg.name)
        lock = _lock(run_dir)
    except BaseException:
        executor.close()
        raise
    try:
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
        for pl in plans:
            pl.job["attempt"] = 1
        manifest["cells"] = [
            {
                "cell": pl.cell.cell_id,
                "build": pl.cell.build,
                "mode": pl.cell.mode,
                "variant": pl.cell.variant,
                "repeat": pl.cell.repeat,
                "hash_seed": pl.cell.hash_seed,
                "status": "pending",
                "attempt": 1,
            }
            for pl in plans
        ]
        write_json_atomic(run_dir / MANIFEST, manifest)
        on_event("run_start", {"path": run_dir, "cells": len(plans), "prompts": len(prompts.prompts)})
        todo = list(range(len(plans)))
        failed = _schedule(cfg, plans, todo, manifest, run_dir, setup, executor, on_event, stops.caught)
        manifest.update(status="failed" if failed else "complete", finished=now_iso())
        write_json_atomic(run_dir / MANIFEST, manifest)
        refresh_copy(run_dir)  # the Parquet copy compare/report/history read (JSONL stays the truth)
        return RunOutcome(run_dir, manifest, failed)
    finally:
        executor.close()
        os.close(lock)


def load_for_resume(run_dir: Path) -> tuple[dict[str, Any], ExperimentConfig, PromptSet]:
    """The run's own config and prompts, refused if the prompt file changed since the run began."""
    from pydantic import ValidationError

    from mtpbench.config import config_prompts, format_validation_error

    mpath = run_dir / MANIFEST
    if not mpath.is_file():
        raise UserError(f"{run_dir}: not a mtpbench run (no {MANIFEST})")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{mpath}: unreadable manifest: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("cells"), list):
        raise UserError(f"{mpath}: not a mtpbench manifest (no cells)")
    try:
        cfg = ExperimentConfig.model_validate(manifest.get("config"))
    except ValidationError as exc:
        raise UserError(format_validation_error(mpath, exc).replace(": ", ": config.", 1)) from None
    prompts = config_prompts(cfg)
    want = (manifest.get("prompts") or {}).get("sha256")
    if prompts.sha256() != want:
        raise UserError(f"{cfg.prompts}: the prompts changed since run {run_dir.name} began; start a new run")
    return manifest, cfg, prompts


def resume(
    run_dir: Path, on_event: EventCallback = lambda kind, payload: None, options: RunOptions | None = None
) -> RunOutcome:
    """Run again, in the same folder, the cell-repeats that did not finish (pending, failed, timed out,
    interrupted, or `running` when the runner itself was killed); each is a new attempt whose records
    supersede the earlier attempt's."""
    with StopSignals() as stops:
        return _resume(run_dir, on_event, options or RunOptions(), stops)


def _resume(run_dir: Path, on_event: EventCallback, opts: RunOptions, stops: StopSignals) -> RunOutcome:
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run folder")
    lock = _lock(run_dir)
    try:
        manifest, cfg, prompts = load_for_resume(run_dir)
        cells = [
            Cell(c["build"], c["mode"], c["variant"], int(c["repeat"]), int(c["hash_seed"])) for c in manifest["cells"]
        ]
        setup = _setup(cfg, cells, opts)
        plans = plan(cfg, prompts, cells, str(manifest["run_id"]), str((run_dir / RECORDS).resolve()))
        todo = [i for i, c in enumerate(manifest["cells"]) if c.get("status", "pending") in RERUN]
        if not todo:  # nothing left to run: the manifest (its status, finished time, resumes) stays as it was
            return RunOutcome(run_dir, manifest)
        # Ray refused or unreachable: the manifest stays as it was (nothing of this resume ran).
        executor = _executor(cfg, cells, opts, setup, stops, todo)
        try:
            for i in todo:
                c = manifest["cells"][i]
                # A repeat that never started has no records to supersede: it keeps its attempt number.
                attempt = int(c.get("attempt", 1)) + (c.get("status", "pending") != "pending")
                keep = {k: c[k] for k in ("cell", "build", "mode", "variant", "repeat", "hash_seed")}
                manifest["cells"][i] = {
                    **keep,
                    "status": "pending",
                    "attempt": attempt,
                    "previous": {"status": c.get("status"), "error": c.get("error")},
                }
            for i, pl in enumerate(plans):
                pl.job["attempt"] = int(manifest["cells"][i].get("attempt", 1))
            manifest.update(status="running", finished=None)
            manifest.setdefault("resumed", []).append({"at": now_iso(), "cells": len(todo)})
            write_json_atomic(run_dir / MANIFEST, manifest)
            on_event("run_start", {"path": run_dir, "cells": len(todo), "prompts": len(prompts.prompts)})
            failed = _schedule(cfg, plans, todo, manifest, run_dir, setup, executor, on_event, stops.caught)
        finally:
            executor.close()
        # The verdict covers the whole run: repeats that were fine before this resume count too.
        failed_all = [f"{c['cell']} r{c['repeat']}" for c in manifest["cells"] if c.get("status") != "ok"]
        manifest.update(status="failed" if failed_all else "complete", finished=now_iso())
        write_json_atomic(run_dir / MANIFEST, manifest)
        refresh_copy(run_dir)
        return RunOutcome(run_dir, manifest, failed_all or failed)
    finally:
        os.close(lock)


__all__ = [
    "LOCK",
    "RERUN",
    "STOP_SIGNALS",
    "Cell",
    "CellPlan",
    "Estimate",
    "EventCallback",
    "RunInterrupted",
    "RunOptions",
    "RunOutcome",
    "StopSignals",
    "engine_args_for",
    "estimate",
    "execute",
    "expand",
    "load_for_resume",
    "plan",
    "resume",
    "time_breakdown",
]
