"""Run a config's cell-repeats, each in a fresh subprocess of its build's interpreter: the run stage's entry
point (its public names are listed in __all__: the matrix from cells.py, steering from control.py, cost
from cost.py, execution here).

A cell is build × mode × variant; each of its repeats is one process with its own PYTHONHASHSEED (the
knob that exposes set/dict-iteration-order bugs) and the engine in-process. The runner writes the job
file, starts `python -m mtpbench.engine.worker`, streams the worker's events to a callback (the CLI draws the
progress bar from them; nothing here prints), keeps the engine's log per cell, enforces the timeout and
records every cell's outcome in the manifest as it happens (the store's RunWriter). A failed cell does not
stop the others.
"""

from __future__ import annotations

import fcntl
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
from mtpbench.run.cells import Cell, CellJob, RunOutcome, cell_jobs, config_variant, engine_args_for, expand
from mtpbench.run.control import LOCK, RERUN, STOP_SIGNALS, RunInterrupted, RunOptions, StopSignals
from mtpbench.run.cost import Estimate, estimate, time_breakdown
from mtpbench.run.devices import VISIBILITY_ENV, DevicePool, binding_env, detect, devices_needed, probe_platform
from mtpbench.run.envs.builds import resolve_builds, unresolved
from mtpbench.run.executors import LocalExecutor, RayExecutor, WorkerSpec, make_executor
from mtpbench.run.ray.cluster import RayDeadlines, RaySettings
from mtpbench.schema import CellStatus, RunStatus
from mtpbench.store.baseline import model_identity
from mtpbench.store.manifest import MANIFEST, Manifest, ManifestCell, now_iso, read_manifest
from mtpbench.store.results import refresh_copy
from mtpbench.store.writer import CELL_KEYS, RunWriter

EventCallback = Callable[[str, dict[str, Any]], None]


@dataclass
class _Setup:
    jobs: int
    executor: str
    pool: DevicePool | None
    bind_env: dict[str, str | None]  # build -> visibility variable
    need: list[int]  # devices per cell-repeat
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
    unbound: dict[str, str | None] = dict.fromkeys(cfg.builds)
    if executor == "ray":
        resource = opts.ray_resource or cfg.ray_resource
        if resource is None:
            kind = probe_platform(first.interpreter())["platform"]
            resource = {"cuda": "GPU", "ascend": "NPU"}.get(kind, "CPU")
        return _Setup(
            jobs=jobs,
            executor=executor,
            pool=None,
            bind_env=unbound,
            need=need,
            devices_from="assigned by Ray",
            ray_resource=resource.upper(),
        )
    if jobs == 1 and not explicit:
        # One worker at a time on whatever the environment shows it: the behaviour before device pools.
        return _Setup(
            jobs=1, executor=executor, pool=None, bind_env=unbound, need=need, devices_from="not bound (one job)"
        )
    platforms = {name: probe_platform(build.interpreter())["platform"] for name, build in cfg.builds.items()}
    bind = {name: build.device_env or VISIBILITY_ENV[platforms[name]] for name, build in cfg.builds.items()}
    if explicit:
        devices = [str(d) for d in explicit]
        source = "--devices" if opts.devices else "the config's devices"
    else:
        devices, source = detect(platforms[next(iter(cfg.builds))], first.interpreter(), jobs)
    too_big = [(c, n) for c, n in zip(cells, need, strict=True) if n > len(devices)]
    if too_big:
        cell, n = too_big[0]
        raise UserError(f"{cell.cell_id}: needs {n} devices (tensor × pipeline parallel), pool: {len(devices)}")
    return _Setup(jobs=jobs, executor=executor, pool=DevicePool(devices), bind_env=bind, need=need, devices_from=source)


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
    indices = range(len(cells)) if todo is None else todo
    ray = RaySettings(
        address=opts.address or cfg.ray_address,
        resource=setup.ray_resource or "GPU",
        deadlines=RayDeadlines.from_config(cfg),
        needs=[(f"{cells[i].cell_id} r{cells[i].repeat}", setup.need[i]) for i in indices],
        caught=stops.caught,
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


def _spec(
    cell_plan: CellJob, run_dir: Path, cfg: ExperimentConfig, devices: list[str], visibility_env: str | None
) -> WorkerSpec:
    """How to start and watch one cell-repeat's worker: its job and log files (per attempt), its command, its
    environment with its devices bound, its deadlines."""
    attempt = int(cell_plan.job.get("attempt", 1))
    name = cell_plan.cell.slug if attempt == 1 else f"{cell_plan.cell.slug}-a{attempt}"
    job_path = run_dir / "jobs" / f"{name}.json"
    return WorkerSpec(
        command=cell_plan.command(str(job_path)),
        env={**cell_plan.env, **binding_env(visibility_env, devices)},
        job=cell_plan.job,
        job_path=str(job_path),
        log_path=str(run_dir / "logs" / f"{name}.log"),
        startup_timeout_s=cfg.startup_timeout_s or cfg.timeout_s,
        generation_timeout_s=cfg.generation_timeout_s or cfg.timeout_s,
        devices=devices,
    )


# What a worker's thread puts on the scheduler's queue: an event of the worker, or its manifest entry.
_EVENT = "event"
_DONE = "done"


class _Scheduler:
    """Runs cell-repeats (indices into the plans and the manifest's cells) on the executor, as many at once
    as jobs and devices allow, and records each one's state in the manifest as it changes. Runs in the main
    thread: signal handlers only note the signal, this loop stops the workers, so no handler ever runs
    between starting a worker and knowing about it."""

    def __init__(
        self,
        *,
        cfg: ExperimentConfig,
        plans: list[CellJob],
        run: RunWriter,
        setup: _Setup,
        executor: LocalExecutor | RayExecutor,
        on_event: EventCallback,
        caught: list[int],
    ) -> None:
        self.cfg = cfg
        self.plans = plans
        self.run = run
        self.setup = setup
        self.executor = executor
        self.on_event = on_event
        self.caught = caught
        self.stop = threading.Event()
        self.queue: queue.Queue[tuple[str, int, dict[str, Any]]] = queue.Queue()
        self.pending: list[int] = []
        self.active: dict[int, tuple[threading.Thread, list[str]]] = {}  # index -> its thread and devices
        self.failed: list[str] = []
        self.session: dict[str, Any] = {}
        self.t_start = time.monotonic()
        self.busy_s = 0.0
        self.ui_failed = False

    def run_all(self, todo: list[int]) -> list[str]:
        """Run `todo`; the ones that failed. RunInterrupted when a stop signal ended it."""
        self.session = {"started": now_iso(), "cells": len(todo), **self.setup.describe()}
        if self.executor.warnings:
            self.session["warnings"] = list(self.executor.warnings)
        self.run.manifest.setdefault("sessions", []).append(self.session)
        self.run.save()
        for text in self.executor.warnings:
            self._emit("warning", {"text": text})
        self.pending = list(todo)
        self.t_start = time.monotonic()
        try:
            self._loop()
        except BaseException:
            self._abort()
            raise
        finally:
            self.session.update(
                finished=now_iso(), wall_s=round(time.monotonic() - self.t_start, 3), busy_s=round(self.busy_s, 3)
            )
        if self.caught:
            self.session["interrupted_by"] = signal.Signals(self.caught[0]).name
            self.run.finish(RunStatus.INTERRUPTED)
            raise RunInterrupted(self.caught[0], self.run.path)
        return self.failed

    def _loop(self) -> None:
        while self.pending or self.active:
            if self.caught and not self.stop.is_set():
                self.stop.set()
            if not self.stop.is_set():
                self._start_what_fits()
            elif not self.active:
                break
            try:
                kind, index, data = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if kind == _EVENT:
                self._on_worker_event(index, data)
            else:
                self._on_done(index, data)

    def _abort(self) -> None:
        """A bug here must not orphan a worker nor leave the run looking alive: stop all, say so."""
        self.stop.set()
        for thread, _ in self.active.values():
            thread.join()
        self.run.finish(RunStatus.INTERRUPTED)

    def _start_what_fits(self) -> None:
        for index in list(self.pending):
            if len(self.active) >= self.setup.jobs:
                break
            devices: list[str] | None = []
            if self.setup.pool is not None:
                devices = self.setup.pool.take(self.setup.need[index])
                if devices is None:
                    continue  # not enough free devices for this one: a smaller one may fit
            self.pending.remove(index)
            self._start(index, devices or [])

    def _start(self, index: int, devices: list[str]) -> None:
        plan = self.plans[index]
        spec = _spec(plan, self.run.path, self.cfg, devices, self.setup.bind_env.get(plan.cell.build))
        if self.setup.executor == "ray":
            spec.devices = [f"ray{j}" for j in range(self.setup.need[index])]
        self.run.update_cell(
            index,
            status=CellStatus.RUNNING,
            attempt=int(plan.job.get("attempt", 1)),
            devices=devices or None,
            started=now_iso(),
            queued_s=round(time.monotonic() - self.t_start, 3),
            log=str(Path(spec.log_path).relative_to(self.run.path)),
        )
        thread = threading.Thread(target=self._work, args=(index, spec), name=f"cell-{index}", daemon=True)
        self.active[index] = (thread, devices)
        self._emit("cell_start", {"cell": plan.cell, "index": index, "seq": index, "devices": devices})
        thread.start()

    def _work(self, index: int, spec: WorkerSpec) -> None:
        """A worker's thread: the executor runs it; its events and then its manifest entry go on the queue."""
        entry: dict[str, Any]
        try:
            entry = self.executor.run(spec, self.stop, lambda event: self.queue.put((_EVENT, index, event)))
        except BaseException as exc:  # a bug or an executor failure ends this cell, not the run
            entry = {"status": CellStatus.FAILED, "error": f"{type(exc).__name__}: {exc}", "wall_s": 0.0}
        self.queue.put((_DONE, index, entry))

    def _on_worker_event(self, index: int, data: dict[str, Any]) -> None:
        event = dict(data)
        name = str(event.pop("event"))
        if name == "spawned":
            self.run.update_cell(index, pid=event.get("pid"))
            return
        if name == "engine_ready":
            self.run.cells[index]["engine_start_s"] = round(float(event.get("engine_start_s", 0.0)), 3)
        self._emit(name, {**event, "cell": self.plans[index].cell, "seq": index})

    def _on_done(self, index: int, entry: dict[str, Any]) -> None:
        thread, devices = self.active.pop(index)
        thread.join()
        if self.setup.pool is not None:
            self.setup.pool.give_back(devices)
        cell = self.run.cells[index]
        cell.update(entry)
        cell.pop("pid", None)
        self.busy_s += float(entry.get("wall_s") or 0.0)
        if entry["status"] != CellStatus.OK:
            plan = self.plans[index]
            self.failed.append(f"{plan.cell.cell_id} r{plan.cell.repeat}")
        self.run.save()
        self._emit("cell_end", {**entry, "cell": self.plans[index].cell, "index": index, "seq": index})

    def _emit(self, kind: str, payload: dict[str, Any]) -> None:
        # The progress view writes to a terminal or pipe that may be gone (a CI runner killed our parent):
        # that must neither stop the run nor keep the manifest from saying how it ended.
        if self.ui_failed:
            return
        try:
            self.on_event(kind, payload)
        except Exception as exc:
            self.ui_failed = True
            self.session["ui_error"] = f"{type(exc).__name__}: {exc}"


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
    missing = unresolved(cfg, {c.build for c in cells})
    if missing:  # the caller resolves builds from pins first (run/envs/builds.py): the runner never installs
        raise UserError(f"build {missing[0]}: its environment is not provisioned (resolve_builds first)")
    setup = _setup(cfg, cells, opts)
    executor = _executor(cfg, cells, opts, setup, stops)
    try:
        run = RunWriter.in_new_folder(
            out_dir,
            config=cfg.model_dump(mode="json"),
            config_path=config_path,
            prompts={"name": prompts.name, "sha256": prompts.sha256(), "ids": [p.id for p in prompts.prompts]},
        )
        lock = _lock(run.path)
    except BaseException:
        executor.close()
        raise
    try:
        _describe_run(run, cfg)
        plans = cell_jobs(cfg, prompts, cells, run.run_id, str(run.records_path.resolve()))
        for cell_plan in plans:
            cell_plan.job["attempt"] = 1
            cell = cell_plan.cell
            run.add_cell(
                build=cell.build,
                mode=cell.mode,
                variant=cell.label,
                repeat=cell.repeat,
                hash_seed=cell.hash_seed,
                status=CellStatus.PENDING,
                attempt=1,
                # A k sweep's cell says its k (store/manifest.py ManifestCell.k); a single-k run writes none.
                **({"k": cell.k} if cell.k is not None else {}),
            )
        run.save()
        on_event("run_start", {"path": run.path, "cells": len(plans), "prompts": len(prompts.prompts)})
        scheduler = _Scheduler(
            cfg=cfg, plans=plans, run=run, setup=setup, executor=executor, on_event=on_event, caught=stops.caught
        )
        failed = scheduler.run_all(list(range(len(plans))))
        _finish(run, failed)
        return RunOutcome(path=run.path, manifest=run.manifest, failed=failed)
    finally:
        executor.close()
        os.close(lock)


def _describe_run(run: RunWriter, cfg: ExperimentConfig) -> None:
    """What the manifest says beyond the config: how the run was asked for and what it ran on."""
    # How the run was asked for, so a baseline saved from it says how to reproduce it.
    asked = " ".join(["mtpbench", *sys.argv[1:]]) if sys.argv[0].endswith("mtpbench") else None
    run.manifest["command"] = asked
    # Identity of the weights, not their path: a baseline saved on one machine matches a run on another.
    run.manifest["model"] = model_identity(cfg.model)
    run.manifest["drafter"] = model_identity(cfg.speculative.model)


def _finish(run: RunWriter, failed: list[str]) -> None:
    """The run's end in its manifest, and the Parquet copy compare/report/history read (JSONL stays the truth)."""
    run.finish(RunStatus.FAILED if failed else RunStatus.COMPLETE)
    refresh_copy(run.path)


@dataclass(frozen=True)
class Resumable:
    """A stored run as `--resume` reads it back: the manifest's raw dict (what the RunWriter goes on writing),
    its typed model (store/manifest.py, the one reader of manifest.json), the run's own config and prompts."""

    manifest: dict[str, Any]
    typed: Manifest
    cfg: ExperimentConfig
    prompts: PromptSet

    @property
    def todo(self) -> list[int]:
        """The cell-repeats a resume runs again (pending, failed, timed out, interrupted, or `running`)."""
        return [i for i, c in enumerate(self.typed.cells) if c.status in RERUN]


def _stored_seed(c: ManifestCell) -> int:
    # A cell-repeat is run again with the PYTHONHASHSEED it was planned with: a manifest without one cannot resume.
    if c.hash_seed is None:
        raise UserError(f"manifest cell {c.cell} r{c.repeat}: no hash_seed to run it again with")
    return c.hash_seed


def load_for_resume(run_dir: Path) -> Resumable:
    """The run's own config and prompts, refused if the prompt file changed since the run began."""
    from pydantic import ValidationError

    from mtpbench.config import config_prompts, format_validation_error

    mpath = run_dir / MANIFEST
    manifest, typed = read_manifest(mpath)
    try:
        cfg = ExperimentConfig.model_validate(manifest.get("config"))
    except ValidationError as exc:
        raise UserError(format_validation_error(mpath, exc).replace(": ", ": config.", 1)) from None
    prompts = config_prompts(cfg)
    if prompts.sha256() != typed.prompts.sha256:
        raise UserError(f"{cfg.prompts}: the prompts changed since run {run_dir.name} began; start a new run")
    return Resumable(manifest, typed, cfg, prompts)


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
        stored = load_for_resume(run_dir)
        prompts, todo = stored.prompts, stored.todo
        run = RunWriter(run_dir, stored.manifest)
        # The environments of builds from pins, as the run had them: from the cache (the same key), or
        # installed again when `mtpbench build remove` took them away since.
        cfg, _ = resolve_builds(stored.cfg, {stored.typed.cells[i].build for i in todo})
        cells = [
            Cell(
                build=c.build,
                mode=c.mode,
                variant=config_variant(c.variant, c.k),
                repeat=c.repeat,
                hash_seed=_stored_seed(c),
                k=c.k,
            )
            for c in stored.typed.cells
        ]
        setup = _setup(cfg, cells, opts)
        plans = cell_jobs(cfg, prompts, cells, run.run_id, str(run.records_path.resolve()))
        if not todo:  # nothing left to run: the manifest (its status, finished time, resumes) stays as it was
            return RunOutcome(path=run_dir, manifest=run.manifest)
        # Ray refused or unreachable: the manifest stays as it was (nothing of this resume ran).
        executor = _executor(cfg, cells, opts, setup, stops, todo)
        try:
            _new_attempts(run, plans, todo)
            run.manifest.update(status=RunStatus.RUNNING, finished=None)
            run.manifest.setdefault("resumed", []).append({"at": now_iso(), "cells": len(todo)})
            run.save()
            on_event("run_start", {"path": run_dir, "cells": len(todo), "prompts": len(prompts.prompts)})
            scheduler = _Scheduler(
                cfg=cfg, plans=plans, run=run, setup=setup, executor=executor, on_event=on_event, caught=stops.caught
            )
            failed = scheduler.run_all(todo)
        finally:
            executor.close()
        # The verdict covers the whole run: repeats that were fine before this resume count too.
        failed_all = [f"{c['cell']} r{c['repeat']}" for c in run.cells if c.get("status") != CellStatus.OK]
        _finish(run, failed_all)
        return RunOutcome(path=run_dir, manifest=run.manifest, failed=failed_all or failed)
    finally:
        os.close(lock)


def _new_attempts(run: RunWriter, plans: list[CellJob], todo: list[int]) -> None:
    """Each cell-repeat to run again becomes pending as a new attempt (what it was before is kept as
    `previous`); every plan's job says its repeat's attempt, so the records say which attempt wrote them."""
    for i in todo:
        cell = run.cells[i]
        started = cell.get("status", CellStatus.PENDING) != CellStatus.PENDING
        # A repeat that never started has no records to supersede: it keeps its attempt number.
        attempt = int(cell.get("attempt", 1)) + started
        run.cells[i] = {
            **{key: cell[key] for key in CELL_KEYS},
            # A k sweep's cell keeps its k (store/manifest.py ManifestCell.k) through its new attempt.
            **({"k": cell["k"]} if cell.get("k") is not None else {}),
            "status": CellStatus.PENDING,
            "attempt": attempt,
            "previous": {"status": cell.get("status"), "error": cell.get("error")},
        }
    for i, cell_plan in enumerate(plans):
        cell_plan.job["attempt"] = int(run.cells[i].get("attempt", 1))


__all__ = [
    "LOCK",
    "RERUN",
    "STOP_SIGNALS",
    "Cell",
    "CellJob",
    "Estimate",
    "EventCallback",
    "Resumable",
    "RunInterrupted",
    "RunOptions",
    "RunOutcome",
    "StopSignals",
    "cell_jobs",
    "engine_args_for",
    "estimate",
    "execute",
    "expand",
    "load_for_resume",
    "resume",
    "time_breakdown",
]
