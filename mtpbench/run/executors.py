"""Where a cell-repeat's worker process runs: here (local) or on a Ray cluster node, and how it is watched.

`supervise` is the one place a worker process is started and watched, on this machine or inside a Ray
task on another: it starts `<build python> -m mtpbench.engine.worker JOB.json` in its own process group, keeps
its log, turns its event lines into callbacks, and kills the whole group (SIGTERM, then SIGKILL) when
the start-up deadline (process start to engine ready: imports, weights, graph capture) or the
generation deadline (engine ready to exit) passes, or when asked to stop. The stop request is a
`threading.Event` checked right after the process exists, so a stop that arrives while it is being
started still reaches it: there is no moment when a worker runs unwatched. The worker also dies with
the thread that started it (PR_SET_PDEATHSIG, set by the worker from MTPBENCH_PARENT_PID), so even a
SIGKILL of the runner leaves nothing behind.

The Ray executor submits one task per cell-repeat that requests the cell's devices (`num_gpus`, a custom
`NPU` resource, or CPUs), runs `supervise` on the node with a node-local records file, and returns the
records, the log and the events to the driver, which appends them to the run folder. A node needs none of
the driver's files: mtpbench travels as Ray's `py_modules` copy, the worker's PYTHONPATH is made on the
node from that copy (run/pythonpath.py), and a build without an interpreter of its own runs in the node's
Ray interpreter. What a node does need: Ray, each build's own interpreter at its configured path, and the
model's weights at the config's path. With no address named, the cluster is one mtpbench starts on loopback and stops;
starting or reaching it, shipping mtpbench and placing a task each have a deadline (run/ray/cluster.py).
Ray is imported only when asked for: it is an optional extra.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

from mtpbench.engine.procs import stop_group
from mtpbench.engine.records import EVENT_PREFIX
from mtpbench.errors import UserError
from mtpbench.run.pythonpath import user_pythonpath, worker_pythonpath
from mtpbench.run.ray.cluster import RaySettings, fits, join, ray_request
from mtpbench.schema import CellStatus

EventSink = Callable[[dict[str, Any]], None]
PARENT_ENV = "MTPBENCH_PARENT_PID"
KILL_GRACE_S = 3.0


@dataclass
class WorkerSpec:
    """Everything needed to start and watch one worker, picklable so a Ray task can carry it."""

    command: list[str]
    env: dict[str, str]  # added to the inherited environment
    job: dict[str, Any]
    job_path: str
    log_path: str
    startup_timeout_s: float
    generation_timeout_s: float
    devices: list[str] = field(default_factory=list)


def _tail(path: str, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def kill_group(proc: subprocess.Popen[str], grace_s: float = KILL_GRACE_S) -> None:
    """Stop a worker and everything it started (vLLM's engine or TP processes share its group)."""
    stop_group(proc, grace_s)  # start_new_session: the worker leads its own group
    if proc.returncode is None:
        proc.wait()


class Ending(Enum):
    """Why supervise stopped a worker that had not exited by itself."""

    STOPPED = "stopped"  # asked to (a stop signal, or the run ending)
    STARTUP_TIMEOUT = "startup-timeout"  # no engine_ready event within startup_timeout_s
    GENERATION_TIMEOUT = "generation-timeout"  # engine ready, but no exit within generation_timeout_s


@dataclass
class _Watched:
    """What the worker said while it ran: its error events and when its engine was ready."""

    errors: list[str] = field(default_factory=list)
    ready_at: list[float] = field(default_factory=list)  # monotonic time of engine_ready (one at most)


def supervise(spec: WorkerSpec, stop: threading.Event, on_event: EventSink) -> dict[str, Any]:
    """Run one worker to its end, a deadline or a stop request; returns its manifest entry."""
    _write_job(spec)
    t0 = time.monotonic()
    if stop.is_set():
        return {"error": "interrupted before the worker started", "status": CellStatus.INTERRUPTED, "wall_s": 0.0}
    with open(spec.log_path, "w", encoding="utf-8") as log:
        try:
            proc = _start_worker(spec)
        except OSError as exc:
            return {"error": f"cannot start {spec.command[0]}: {exc}", "status": CellStatus.FAILED, "wall_s": 0.0}
        on_event({"event": "spawned", "pid": proc.pid})
        watched = _Watched()
        reader = threading.Thread(
            target=_pump, args=(proc, log, watched, on_event), name=f"pump-{proc.pid}", daemon=True
        )
        reader.start()
        try:
            ending = _watch(proc, spec, stop, watched, t0)
        finally:
            # Whatever the worker left in its group (engine processes, a stray child holding the log pipe)
            # goes with it: nothing of a finished cell-repeat may hold a device for the next one.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            reader.join(timeout=10)
    return _entry(spec, ending, proc.returncode, watched, t0, time.monotonic())


def _write_job(spec: WorkerSpec) -> None:
    Path(spec.job_path).parent.mkdir(parents=True, exist_ok=True)
    Path(spec.job_path).write_text(json.dumps(spec.job, indent=1))
    Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)


def _start_worker(spec: WorkerSpec) -> subprocess.Popen[str]:
    """The worker, leading a process group of its own, its output (events and log) on one pipe."""
    return subprocess.Popen(
        spec.command,
        env={**os.environ, **spec.env, PARENT_ENV: str(os.getpid())},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
    )


def _pump(proc: subprocess.Popen[str], log: TextIO, watched: _Watched, on_event: EventSink) -> None:
    """Every line of the worker into its log; its event lines also to `on_event` (errors and readiness noted)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(EVENT_PREFIX):
            try:
                event = json.loads(line[len(EVENT_PREFIX) :])
            except json.JSONDecodeError:
                event = None
            if isinstance(event, dict) and "event" in event:
                if event["event"] == "error":
                    watched.errors.append(str(event.get("error")))
                elif event["event"] == "engine_ready":
                    watched.ready_at.append(time.monotonic())
                on_event(event)
        log.write(line)
        log.flush()


def _watch(
    proc: subprocess.Popen[str], spec: WorkerSpec, stop: threading.Event, watched: _Watched, t0: float
) -> Ending | None:
    """Until the worker exits (None), or why its group was stopped: a stop request or a deadline (the start-up
    deadline counts from `t0`, before the process was started)."""
    try:
        while proc.poll() is None:
            ending = _due(spec, stop, watched, t0)
            if ending is not None:
                kill_group(proc, grace_s=KILL_GRACE_S if ending is Ending.STOPPED else 0.5)
                return ending
            stop.wait(0.05)
    except BaseException:
        # Cancelled from outside (a Ray task cancel raises KeyboardInterrupt here): take the group down.
        kill_group(proc)
        raise
    return None


def _due(spec: WorkerSpec, stop: threading.Event, watched: _Watched, t0: float) -> Ending | None:
    now = time.monotonic()
    if stop.is_set():
        return Ending.STOPPED
    if not watched.ready_at and now - t0 > spec.startup_timeout_s:
        return Ending.STARTUP_TIMEOUT
    if watched.ready_at and now - watched.ready_at[0] > spec.generation_timeout_s:
        return Ending.GENERATION_TIMEOUT
    return None


def _entry(
    spec: WorkerSpec, ending: Ending | None, returncode: int | None, watched: _Watched, t0: float, end: float
) -> dict[str, Any]:
    """The worker's manifest entry: its times, its status and, unless it ended ok, why."""
    entry: dict[str, Any] = {"error": None, "wall_s": round(end - t0, 3)}
    if watched.ready_at:
        entry["startup_s"] = round(watched.ready_at[0] - t0, 3)
        entry["generation_s"] = round(end - watched.ready_at[0], 3)
    else:
        entry["startup_s"] = round(end - t0, 3)
    if ending is Ending.STOPPED:
        entry.update(status=CellStatus.INTERRUPTED, error="interrupted: the worker's process group was stopped")
    elif ending is Ending.STARTUP_TIMEOUT:
        entry.update(
            status=CellStatus.TIMEOUT,
            error=f"engine start-up exceeded {spec.startup_timeout_s:g} s (startup_timeout_s)\n{_tail(spec.log_path)}",
        )
    elif ending is Ending.GENERATION_TIMEOUT:
        entry.update(
            status=CellStatus.TIMEOUT,
            error=f"generation exceeded {spec.generation_timeout_s:g} s (generation_timeout_s)\n{_tail(spec.log_path)}",
        )
    elif returncode == 0:
        entry["status"] = CellStatus.OK
    else:
        head = watched.errors[0] if watched.errors else f"worker exited with code {returncode}"
        entry.update(status=CellStatus.FAILED, error=f"{head}\n{_tail(spec.log_path)}")
    return entry


# --- executors ------------------------------------------------------------------------------------------


class LocalExecutor:
    """Workers on this machine; the runner's thread per active cell-repeat calls `run`."""

    name = "local"
    warnings: tuple[str, ...] = ()  # what the run says about where it runs: nothing, here

    def run(self, spec: WorkerSpec, stop: threading.Event, on_event: EventSink) -> dict[str, Any]:
        return supervise(spec, stop, on_event)

    def close(self) -> None:
        pass


def ray_task_body(spec_dict: dict[str, Any]) -> dict[str, Any]:
    """Runs on the Ray node: the worker writes into node-local files that travel back in the result."""
    own_python = spec_dict.pop("own_python", False)
    spec = WorkerSpec(**spec_dict)
    if own_python:
        # A build without an interpreter of its own runs in mtpbench's environment: on a node, Ray's.
        spec.command = [sys.executable, *spec.command[1:]]
    tmp = Path(tempfile.mkdtemp(prefix="mtpbench-ray-"))
    # The driver sent only the user's entries: mtpbench's folder is made here, from the copy Ray unpacked
    # on this node (py_modules), in this node's cache, so no path of the driver's has to exist here.
    spec.env["PYTHONPATH"] = worker_pythonpath(spec.env.get("PYTHONPATH", ""))
    spec.job["records_path"] = str(tmp / "records.jsonl")
    old_job = spec.job_path
    spec.job_path, spec.log_path = str(tmp / "job.json"), str(tmp / "worker.log")
    spec.command = [spec.job_path if a == old_job else a for a in spec.command]
    events: list[dict[str, Any]] = []
    entry = supervise(spec, threading.Event(), events.append)
    records = Path(spec.job["records_path"])
    return {
        "entry": {**entry, "node": socket.gethostname()},
        "records": records.read_text(encoding="utf-8") if records.exists() else "",
        "log": Path(spec.log_path).read_text(encoding="utf-8", errors="replace"),
        "events": events,
    }


class RayExecutor:
    """Each cell-repeat a Ray task requesting the cell's devices; results come back to the driver. Joining
    (or first starting) the cluster, checking that every cell fits a node and shipping mtpbench are each
    bounded (run/ray/cluster.py); so is a submitted task that no live node can place."""

    name = "ray"

    def __init__(self, settings: RaySettings, append: Callable[[str, str], None]) -> None:
        try:
            import ray
        except ImportError:
            raise UserError("--executor ray needs Ray: pip install 'mtpbench[ray]'") from None
        self.ray = ray
        self.settings = settings
        self.resource = settings.resource.upper()
        self.append = append
        self._nodes: tuple[float, list[dict[str, Any]]] = (0.0, [])
        self._nodes_lock = threading.Lock()
        self.joined = join(ray, settings)  # stops what it started if it fails
        self.address = self.joined.address
        # A named cluster that anyone may use (no token, or reachable beyond loopback): said once in the run.
        self.warnings = tuple(w for w in (self.joined.warning,) if w)
        self.task = ray.remote(max_retries=0)(ray_task_body)

    def _placeable(self, request: dict[str, float]) -> bool:
        """Whether some live node could ever run the task (not whether it is free now); cached for 2 s."""
        with self._nodes_lock:
            t, nodes = self._nodes
            if time.monotonic() - t > 2.0:
                try:
                    nodes = self.ray.nodes()
                except Exception:  # the GCS briefly unreachable: judge by what was known
                    pass
                self._nodes = (time.monotonic(), nodes)
        return any(fits(n, request) for n in nodes)

    def _options(self, devices: int) -> dict[str, Any]:
        """The task's resource request in Ray's option names (ray_request's, as `.options()` takes them)."""
        if self.resource == "GPU":
            return {"num_gpus": devices, "num_cpus": 1}
        if self.resource == "NPU":
            return {"resources": {"NPU": devices}, "num_cpus": 1}
        return {"num_cpus": devices}

    def run(self, spec: WorkerSpec, stop: threading.Event, on_event: EventSink) -> dict[str, Any]:
        """One cell-repeat as a Ray task, to its end, a stop request or a node that can never place it; its
        records, log and events delivered here; returns its manifest entry."""
        devices = max(len(spec.devices), 1)
        task_spec = self._task_spec(spec)
        t0 = time.monotonic()
        request = ray_request(self.resource, devices)
        ref = self.task.options(**self._options(devices)).remote(task_spec)
        unplaced = self._wait(ref, stop, request, t0)
        if unplaced is not None:
            return unplaced
        errors = self.ray.exceptions
        try:
            result = self.ray.get(ref)
        except (errors.TaskCancelledError, errors.RayTaskError, errors.RuntimeEnvSetupError, errors.RayError) as exc:
            return self._failure(exc, stop, t0)
        return self._deliver(spec, result, on_event, t0)

    def _task_spec(self, spec: WorkerSpec) -> dict[str, Any]:
        """The WorkerSpec as the task on the node gets it: nothing of the driver's paths or device binding."""
        task_spec = {**spec.__dict__, "env": dict(spec.env), "job": {**spec.job}}
        # The driver's mtpbench folder (in its per-user cache) means nothing on a node: the task makes its own.
        task_spec["env"]["PYTHONPATH"] = user_pythonpath(spec.env.get("PYTHONPATH", ""))
        task_spec["own_python"] = spec.command[0] == sys.executable
        # Ray assigns the devices on the node and sets the visibility variable itself.
        for var in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "VLLM_CPU_OMP_THREADS_BIND"):
            task_spec["env"].pop(var, None)
        if self.resource == "CPU":
            # Ray pins no cores but sets OMP_NUM_THREADS to the task's CPUs; vLLM-CPU's own "auto" binding
            # would put every worker of a node on the same cores.
            task_spec["env"]["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
        task_spec["devices"] = []
        return task_spec

    def _wait(self, ref: Any, stop: threading.Event, request: dict[str, float], t0: float) -> dict[str, Any] | None:
        """Until the task is done (None), cancelling it on a stop request; the failed entry of a task that no
        live node could place for ray_place_timeout_s (its node left the cluster)."""
        place_s = self.settings.deadlines.place_s
        cancelled_at: float | None = None
        unplaceable_since: float | None = None
        while True:
            done, _ = self.ray.wait([ref], timeout=0.1)
            if done:
                return None
            now = time.monotonic()
            if stop.is_set() and cancelled_at is None:
                # Non-forced: the task gets KeyboardInterrupt and stops the worker's process group itself.
                self.ray.cancel(ref, force=False)
                cancelled_at = now
            elif cancelled_at is not None and now - cancelled_at > 15:
                self.ray.cancel(ref, force=True)  # the worker dies with it (PR_SET_PDEATHSIG)
                cancelled_at = float("inf")
            elif cancelled_at is None:
                # Waiting for a free device is normal; waiting for a node that could never take the task
                # (its node left the cluster) is not: that gets a deadline, then the cell fails (resumable).
                unplaceable_since = None if self._placeable(request) else (unplaceable_since or now)
                if unplaceable_since is not None and now - unplaceable_since > place_s:
                    self.ray.cancel(ref, force=True)
                    want = ", ".join(f"{n:g} {resource}" for resource, n in request.items())
                    return {
                        "status": CellStatus.FAILED,
                        "wall_s": round(now - t0, 3),
                        "error": f"no live node of the Ray cluster could place this task ({want}) for "
                        f"{place_s:g} s (ray_place_timeout_s)",
                    }

    def _failure(self, exc: Exception, stop: threading.Event, t0: float) -> dict[str, Any]:
        """The manifest entry of a task that raised instead of returning."""
        errors = self.ray.exceptions
        wall_s = round(time.monotonic() - t0, 3)
        first_line = str(exc).splitlines()[0]
        if isinstance(exc, (errors.TaskCancelledError, errors.RayTaskError)):
            if stop.is_set():
                return {
                    "status": CellStatus.INTERRUPTED,
                    "error": "interrupted: the Ray task was cancelled",
                    "wall_s": wall_s,
                }
            return {"status": CellStatus.FAILED, "error": f"Ray task failed: {first_line}", "wall_s": wall_s}
        if isinstance(exc, errors.RuntimeEnvSetupError):
            return {
                "status": CellStatus.FAILED,
                "wall_s": wall_s,
                "error": f"the node could not set up mtpbench (py_modules) within "
                f"{self.settings.deadlines.upload_s:g} s (ray_upload_timeout_s) or failed: {first_line}",
            }
        # A node or worker that died mid-task lands here: this cell fails, the others go on, and --resume
        # runs it again.
        return {"status": CellStatus.FAILED, "error": f"Ray: {type(exc).__name__}: {first_line}", "wall_s": wall_s}

    def _deliver(self, spec: WorkerSpec, result: dict[str, Any], on_event: EventSink, t0: float) -> dict[str, Any]:
        """The task's log, records and events, here where the driver keeps them; its manifest entry."""
        Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(spec.log_path).write_text(result["log"], encoding="utf-8")
        if result["records"]:
            self.append(spec.job["records_path"], result["records"])
        for event in result["events"]:
            if event.get("event") != "spawned":  # the pid is the node's, meaningless here
                on_event(event)
        entry = dict(result["entry"])
        # Time in Ray's queue (waiting for a device on some node) is not the worker's.
        entry["ray_wall_s"] = round(time.monotonic() - t0, 3)
        return entry

    def close(self) -> None:
        """Leave the cluster; stop it if mtpbench started it (a cluster the user started keeps running)."""
        self.joined.leave(self.ray)


def append_lines(path: str, text: str) -> None:
    """Append whole lines to records.jsonl the way the workers do (same lock, same torn-line mark)."""
    from mtpbench.engine.records import append_lines as append

    append(path, text.encode())


def make_executor(kind: str, ray: RaySettings | None = None) -> LocalExecutor | RayExecutor:
    if kind == "local":
        return LocalExecutor()
    if kind == "ray":
        settings = ray or RaySettings(None, "GPU")
        # A named address (option, config, RAY_ADDRESS) is joined; none: mtpbench starts its own cluster.
        settings.address = settings.address or os.environ.get("RAY_ADDRESS") or None
        return RayExecutor(settings, append_lines)
    raise UserError(f"--executor {kind!r}: expected local or ray")


__all__ = [
    "LocalExecutor",
    "RayExecutor",
    "RaySettings",
    "WorkerSpec",
    "kill_group",
    "make_executor",
    "ray_task_body",
    "supervise",
]
