"""Expand a config into cell-repeats and run each in a fresh subprocess of its build's interpreter.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtpbench.config import ExperimentConfig, PromptSet
from mtpbench.errors import ExitCode, UserError
from mtpbench.patches import PATCHES_ENV
from mtpbench.run.devices import VISIBILITY_ENV, DevicePool, binding_env, detect, devices_needed, probe_platform
from mtpbench.run.executors import LocalExecutor, RayExecutor, WorkerSpec, make_executor
from mtpbench.run.pythonpath import package_path_dir as package_path_dir  # re-exported: callers knew it here
from mtpbench.run.pythonpath import worker_pythonpath
from mtpbench.store.baseline import model_identity
from mtpbench.store.results import (
    MANIFEST,
    RECORDS,
    new_manifest,
    new_run_dir,
    now_iso,
    refresh_copy,
    write_json_atomic,
)

EventCallback = Callable[[str, dict[str, Any]], None]


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
        return [self.python, "-m", "mtpbench.engine.worker", job_path]


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
        pythonpath = worker_pythonpath(build.env.get("PYTHONPATH", ""), os.environ.get("PYTHONPATH", ""))
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
            "prompt_mode": cfg.prompt_mode,
            "records_path": records_path,
            # A build with its own interpreter must not import vLLM from this environment (the worker checks).
            "foreign_prefix": sys.prefix if build.python else None,
            # offline | serving (mtpbench/engine/serving.py); the worker dispatches on its kind.
            "workload": cfg.workload.model_dump(mode="json"),
        }
        plans.append(CellPlan(c, build.python or sys.executable, env, job))
    return plans


# --- executing -------------------------------------------------------------------------------------------

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LOCK = ".lock"
RERUN = ("pending", "running", "failed", "timeout", "interrupted")


class RunInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM/SIGHUP stopped the run: every worker is gone and the manifest says `interrupted`."""

    def __init__(self, signum: int, path: Path) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.path = path

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 SIGINT, 143 SIGTERM, 129 SIGHUP

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


class StopSignals:
    """SIGINT/SIGTERM/SIGHUP only noted while installed (the scheduling loop acts on them), so no handler
    ever runs between starting a worker and knowing about it. Nested uses share the outermost one: the
    CLI installs it before loading the config, so a signal at any moment of a run ends in `interrupted`."""

    active: StopSignals | None = None

    def __init__(self) -> None:
        self.caught: list[int] = []
        self._old: dict[int, Any] = {}
        self._outer: StopSignals | None = None

    def __enter__(self) -> StopSignals:
        if StopSignals.active is not None:
            self._outer = StopSignals.active
            return self._outer
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._note) for s in STOP_SIGNALS}
        StopSignals.active = self
        return self

    def rearm(self) -> None:
        """Take the signals back from a library that installed its own (ray.init sets a SIGTERM handler
        that exits the driver at once, leaving the run `running` and its tasks to Ray)."""
        owner = self._outer or self
        if owner._old and threading.current_thread() is threading.main_thread():
            for s in STOP_SIGNALS:
                signal.signal(s, owner._note)

    def _note(self, signum: int, frame: Any) -> None:
        self.caught.append(signum)

    def __exit__(self, *exc: object) -> None:
        if self._outer is not None:
            return
        for s, h in self._old.items():
            signal.signal(s, h)
        StopSignals.active = None


@dataclass
class RunOptions:
    """How to execute, from the command line; None means the config's value (or its default)."""

    jobs: int | None = None
    devices: list[str] | None = None
    executor: str | None = None
    address: str | None = None
    ray_resource: str | None = None


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
                    c.update(status="running", attempt=int(pl.job.get("attempt", 1)), devices=devs or None,
                             started=now_iso(), queued_s=round(time.monotonic() - t_start, 3),
                             log=str(Path(spec.log_path).relative_to(run_dir)))  # fmt: skip
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


def _execute(cfg: ExperimentConfig, prompts: PromptSet, out_dir: Path, config_path: str, cells: list[Cell],
             on_event: EventCallback, opts: RunOptions, stops: StopSignals) -> RunOutcome:  # fmt: skip
    setup = _setup(cfg, cells, opts)
    executor = make_executor(setup.executor, opts.address or cfg.ray_address, setup.ray_resource or "GPU")
    stops.rearm()
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
            {"cell": pl.cell.cell_id, "build": pl.cell.build, "mode": pl.cell.mode, "variant": pl.cell.variant,
             "repeat": pl.cell.repeat, "hash_seed": pl.cell.hash_seed, "status": "pending", "attempt": 1}
            for pl in plans
        ]  # fmt: skip
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

    from mtpbench.config import format_validation_error, load_prompts

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
    prompts = load_prompts(cfg.prompts)
    want = (manifest.get("prompts") or {}).get("sha256")
    if prompts.sha256() != want:
        raise UserError(f"{cfg.prompts}: the prompts changed since run {run_dir.name} began; start a new run")
    return manifest, cfg, prompts


def resume(run_dir: Path, on_event: EventCallback = lambda kind, payload: None,
           options: RunOptions | None = None) -> RunOutcome:  # fmt: skip
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
        cells = [Cell(c["build"], c["mode"], c["variant"], int(c["repeat"]), int(c["hash_seed"]))
                 for c in manifest["cells"]]  # fmt: skip
        setup = _setup(cfg, cells, opts)
        plans = plan(cfg, prompts, cells, str(manifest["run_id"]), str((run_dir / RECORDS).resolve()))
        todo = [i for i, c in enumerate(manifest["cells"]) if c.get("status", "pending") in RERUN]
        if not todo:  # nothing left to run: the manifest (its status, finished time, resumes) stays as it was
            return RunOutcome(run_dir, manifest)
        for i in todo:
            c = manifest["cells"][i]
            # A repeat that never started has no records to supersede: it keeps its attempt number.
            attempt = int(c.get("attempt", 1)) + (c.get("status", "pending") != "pending")
            keep = {k: c[k] for k in ("cell", "build", "mode", "variant", "repeat", "hash_seed")}
            manifest["cells"][i] = {**keep, "status": "pending", "attempt": attempt,
                                    "previous": {"status": c.get("status"), "error": c.get("error")}}  # fmt: skip
        for i, pl in enumerate(plans):
            pl.job["attempt"] = int(manifest["cells"][i].get("attempt", 1))
        manifest.update(status="running", finished=None)
        manifest.setdefault("resumed", []).append({"at": now_iso(), "cells": len(todo)})
        write_json_atomic(run_dir / MANIFEST, manifest)
        on_event("run_start", {"path": run_dir, "cells": len(todo), "prompts": len(prompts.prompts)})
        executor = make_executor(setup.executor, opts.address or cfg.ray_address, setup.ray_resource or "GPU")
        stops.rearm()
        try:
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


# --- cost -------------------------------------------------------------------------------------------------


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
    return {
        "cells": float(len(cells)),
        "run_wall_s": wall,
        "worker_s": worker,
        "startup_s": startup,
        "engine_start_s": engine,
        "generation_s": gen,
        "queued_s": sum(float(c.get("queued_s") or 0.0) for c in cells),
        "utilisation": worker / slot_s if slot_s else 0.0,
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
            m = json.loads(mpath.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if not isinstance(m, dict) or (m.get("config") or {}).get("name") != cfg.name:
            continue
        got = [c for c in m.get("cells", []) if isinstance(c, dict) and c.get("status") == "ok" and c.get("wall_s")]
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
    return Estimate(max(slots), runs, per, len(slots))
