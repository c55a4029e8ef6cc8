"""Reaching a Ray cluster in bounded time: the cluster mtpbench starts itself when no address is named, the
deadline of every wait on Ray, and the check, before anything is submitted, that each cell-repeat fits a node.

With no `--address`, `RAY_ADDRESS` or `ray_address`, mtpbench starts its own single-node cluster (`ray start
--head --block`) on 127.0.0.1, in a temp folder of its own, and stops it when the run ends. It never calls
`ray.init()` without an address: that joins whatever cluster the last `ray start` here wrote to
/tmp/ray/ray_current_cluster and, if that cluster is gone, retries for ever (issue 23's hang). Ray binds a
node to every interface on the machine's outward address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0; an
unauthenticated cluster beyond loopback runs anyone's code, so the switch is set for the cluster and, while
joined to it, for the driver (which would otherwise rewrite 127.0.0.1 into the outward address).

The cluster runs in a session led by a keeper (`_KEEPER`) whose stdin is a pipe from mtpbench: when it closes
(the run ended, a signal stopped it, or mtpbench died, even by SIGKILL) the keeper SIGKILLs its session. A
session, not a process group: Ray's raylet puts each worker in a group of its own (a group kill left idle
workers running, found by tests/unit/run/test_ray_deadlines.py).

Every blocking Ray call runs in a daemon thread waited for with a deadline while the stop signals are watched:
a deadline ends in ClusterError (one line, exit 3) naming what was waited for and its config key; a signal in
RunInterrupted, mtpbench's own cluster stopped first.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mtpbench.errors import ClusterError, UserError
from mtpbench.run.control import RunInterrupted

T = TypeVar("T")
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
STARTED = "Ray runtime started"  # what `ray start` prints once its GCS and raylet run
STOP_WAIT_S = 10.0  # for the keeper to have killed the cluster, then for what is left to die of SIGKILL

# The cluster's session leader: runs `ray start ... --block`, and kills every process of its session (the
# head's GCS, raylet, agents and workers; Ray puts each worker in a process group of its own, but not in a
# session of its own) once its stdin, a pipe from mtpbench, reaches EOF (mtpbench closed it or died) or
# once `ray start` exits.
_KEEPER = """
import os, signal, subprocess, sys, threading
def sweep():
    for _ in range(50):  # again until a pass finds nobody: a member may fork while it is being killed
        found = 0
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) != os.getpid():
                try:
                    with open("/proc/%s/stat" % d) as f:
                        st = f.read().rsplit(")", 1)[1].split()
                    if int(st[3]) == os.getpid() and st[0] != "Z":
                        os.kill(int(d), signal.SIGKILL)
                        found += 1
                except (OSError, ValueError, IndexError):
                    pass
        if not found:
            return
ending = threading.Lock()  # one way out: mtpbench's EOF, or `ray start` ending by itself
ray = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL)
def watch():
    code = ray.wait()
    if ending.acquire(blocking=False):
        sweep()
        os._exit(code)
threading.Thread(target=watch, daemon=True).start()
sys.stdin.buffer.read()
ending.acquire()
sweep()
import shutil  # and the temp folder, as mtpbench would have, had it lived (its log is kept)
shutil.rmtree(sys.argv[1], ignore_errors=True)
os._exit(0)
"""


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session `sid`, its leader included."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                st = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(st[3]) == sid and st[0] != "Z":
                found.append(int(d.name))
    return found


@dataclass
class RayDeadlines:
    """Seconds each wait on Ray may take (the config's ray_*_timeout_s keys)."""

    start_s: float = 120.0  # mtpbench's own local cluster: `ray start` to "Ray runtime started"
    connect_s: float = 60.0  # a named cluster answering on its port, and ray.init joining it
    upload_s: float = 300.0  # mtpbench to the cluster (py_modules), and its set-up on each node
    place_s: float = 120.0  # a submitted task that no live node of the cluster can place

    @classmethod
    def from_config(cls, cfg: Any) -> RayDeadlines:
        return cls(
            cfg.ray_start_timeout_s, cfg.ray_connect_timeout_s, cfg.ray_upload_timeout_s, cfg.ray_place_timeout_s
        )


@dataclass
class RaySettings:
    """What the Ray executor needs to know before it submits anything."""

    address: str | None  # None: mtpbench starts its own local cluster
    resource: str  # GPU, NPU or CPU: what one device of a cell is
    deadlines: RayDeadlines = field(default_factory=RayDeadlines)
    needs: Sequence[tuple[str, int]] = ()  # (cell id, devices) per cell-repeat: checked against the nodes
    caught: list[int] = field(default_factory=list)  # the stop signals noted so far (StopSignals.caught)


def check_stop(caught: list[int]) -> None:
    if caught:
        raise RunInterrupted(caught[0], None)


def bounded(call: Callable[[], T], seconds: float, what: str, key: str, caught: list[int]) -> T:
    """`call()` in a daemon thread, waited for at most `seconds`: a Ray call that blocks (ray.init retries a
    GCS that does not answer for ever) cannot be interrupted in place. On a deadline or a stop signal the
    thread is abandoned; the process exits soon after, and the thread with it."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    th = threading.Thread(target=run, name="ray-call", daemon=True)
    end = time.monotonic() + seconds
    th.start()
    while th.is_alive():
        check_stop(caught)
        if time.monotonic() > end:
            raise ClusterError(f"{what}: no answer within {seconds:g} s ({key})")
        th.join(0.05)
    if "error" in box:
        raise box["error"]
    return box["value"]


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a plain `HOST:PORT` address; None for what only Ray resolves (auto, ray://...)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or "/" in address or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def wait_reachable(address: str, seconds: float, caught: list[int]) -> None:
    """Until something accepts a TCP connection at `address` (a cluster may still be starting), at most
    `seconds`. Before ray.init: its own retries never give up and print a line every few seconds."""
    hp = host_port(address)
    if hp is None:
        return
    end = time.monotonic() + seconds
    last = ""
    while True:
        check_stop(caught)
        left = end - time.monotonic()
        if left <= 0:
            raise ClusterError(
                f"the Ray cluster at {address} (--address / RAY_ADDRESS / ray_address) did not "
                f"answer within {seconds:g} s (ray_connect_timeout_s){': ' + last if last else ''}"
            )
        try:
            with socket.create_connection(hp, timeout=min(left, 2.0)):
                return
        except OSError as exc:
            last = exc.strerror or str(exc)
        time.sleep(min(0.25, max(end - time.monotonic(), 0.0)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _short_tmp() -> str:
    # Ray's Unix sockets live under the temp folder and a socket path may not pass 107 bytes.
    tmp = tempfile.gettempdir()
    return tmp if len(tmp) <= 40 else "/tmp"


class LocalCluster:
    """A single-node Ray cluster on 127.0.0.1 that mtpbench starts, owns and stops."""

    def __init__(self, deadline_s: float, caught: list[int]) -> None:
        self.deadline_s = deadline_s
        self.caught = caught
        self.proc: subprocess.Popen[bytes] | None = None
        self.tmp: Path | None = None
        self.log: Path | None = None
        self.address: str | None = None

    def start(self) -> str:
        """Start the head and wait until it runs; its address. Stops what it started on any failure."""
        check_stop(self.caught)
        self.tmp = Path(tempfile.mkdtemp(prefix="mtpb-ray-", dir=_short_tmp()))
        fd, log = tempfile.mkstemp(prefix="mtpbench-ray-head-", suffix=".log")
        self.log = Path(log)
        port = _free_port()
        ray_start = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            f"--temp-dir={self.tmp}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--block",
        ]
        env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, LOOPBACK_ENV: "0"}
        cmd = [sys.executable, "-c", _KEEPER, str(self.tmp), *ray_start]
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=fd, stderr=subprocess.STDOUT, start_new_session=True, env=env
            )
        finally:
            os.close(fd)
        t0 = time.monotonic()
        try:
            while STARTED not in self.log.read_text(errors="replace"):
                check_stop(self.caught)
                if self.proc.poll() is not None:
                    tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                    raise ClusterError(
                        f"the local Ray cluster did not start (`ray start` exited with code "
                        f"{self.proc.returncode}: {tail[0]}); its log: {self.log}"
                    )
                if time.monotonic() - t0 > self.deadline_s:
                    raise ClusterError(
                        f"the local Ray cluster did not start within {self.deadline_s:g} s "
                        f"(ray_start_timeout_s); its log: {self.log}"
                    )
                time.sleep(0.1)
        except BaseException as exc:
            self.stop(keep_log=isinstance(exc, ClusterError))
            raise
        self.address = f"127.0.0.1:{port}"
        return self.address

    def stop(self, keep_log: bool = False) -> None:
        """Take the whole cluster down (idempotent); its temp folder goes, its log stays only if asked."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()  # the keeper kills its session and exits
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            # What the keeper could not reach (it was killed, or a member forked past its sweeps).
            end = time.monotonic() + STOP_WAIT_S
            while (left := session_members(proc.pid)) and time.monotonic() < end:
                for pid in left:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.05)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        if self.log is not None and not keep_log:
            self.log.unlink(missing_ok=True)
            self.log = None


def driver_on_loopback() -> Callable[[], None]:
    """Keep this driver's Ray from rewriting 127.0.0.1 into the machine's outward address while it talks to
    a loopback cluster (Ray reads the switch once, at import); returns what puts it back."""
    from ray._private import ray_constants

    old = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    if old is None:  # a Ray without the switch also starts its nodes on the outward address: nothing to match
        return lambda: None
    ray_constants.ENABLE_RAY_CLUSTER = False
    return lambda: setattr(ray_constants, "ENABLE_RAY_CLUSTER", old)


@dataclass
class Joined:
    """A driver's connection to a cluster, and the cluster itself when mtpbench started it."""

    address: str
    cluster: LocalCluster | None = None
    restore: Callable[[], None] = lambda: None

    def leave(self, ray: Any) -> None:
        """Leave the cluster; stop it if mtpbench started it (a cluster the user started keeps running)."""
        try:
            if ray.is_initialized():
                ray.shutdown()
        finally:
            self.restore()
            if self.cluster is not None:
                self.cluster.stop()


def join(ray: Any, s: RaySettings) -> Joined:
    """Start (no address) or reach the cluster, check that every cell-repeat fits one of its nodes, and join
    it with mtpbench as the job's py_modules; each wait bounded. On any failure what was started is stopped."""
    import mtpbench

    d = s.deadlines
    joined = Joined(s.address or "")
    try:
        if s.address is None:
            joined.cluster = LocalCluster(d.start_s, s.caught)
            joined.address = joined.cluster.start()
            joined.restore = driver_on_loopback()
        else:
            wait_reachable(s.address, d.connect_s, s.caught)
        address = joined.address
        # Not the driver's logging: a Ray call in a thread warns that it cannot set a SIGTERM handler (good:
        # the run's own handlers stay), and the retries of a lost GCS are Ray's lines, not mtpbench's.
        logging.getLogger("ray").setLevel(logging.ERROR)

        def init(**kw: Any) -> Any:
            return ray.init(address=address, log_to_driver=False, configure_logging=False, **kw)

        try:
            bounded(init, d.connect_s, f"joining the Ray cluster at {address}", "ray_connect_timeout_s", s.caught)
            nodes = bounded(
                ray.nodes,
                d.connect_s,
                f"listing the nodes of the Ray cluster at {address}",
                "ray_connect_timeout_s",
                s.caught,
            )
        except ValueError as exc:
            raise UserError(f"Ray cluster address {address!r}: {exc}") from None
        except (ConnectionError, RuntimeError) as exc:
            raise ClusterError(f"cannot join the Ray cluster at {address}: {str(exc).splitlines()[0]}") from None
        problem = fit_problem(nodes, s.resource.upper(), s.needs, address)
        if problem:
            raise UserError(problem)  # before mtpbench is shipped or a run folder exists
        # Joined again with mtpbench as the job's py_modules: apart, the upload has a deadline of its own.
        bounded(ray.shutdown, d.connect_s, "leaving the Ray cluster", "ray_connect_timeout_s", s.caught)
        pkg = str(Path(mtpbench.__file__).resolve().parent)
        bounded(
            lambda: init(runtime_env=upload_env(pkg, d.upload_s)),
            d.upload_s,
            f"shipping mtpbench ({package_mb(pkg):.1f} MB, py_modules) to the Ray cluster at {address}",
            "ray_upload_timeout_s",
            s.caught,
        )
    except BaseException:
        joined.leave(ray)
        raise
    return joined


# --- what a cell-repeat asks of a node --------------------------------------------------------------------


def ray_request(resource: str, n: int) -> dict[str, float]:
    """The resources one task asks for: its devices, and a CPU for the worker next to a GPU or NPU."""
    if resource == "CPU":
        return {"CPU": float(n)}
    return {resource: float(n), "CPU": 1.0}


def fits(node: Mapping[str, Any], request: Mapping[str, float]) -> bool:
    have = node.get("Resources") or {}
    return bool(node.get("Alive")) and all(float(have.get(k, 0.0)) >= v for k, v in request.items())


def fit_problem(
    nodes: Sequence[Mapping[str, Any]], resource: str, needs: Sequence[tuple[str, int]], address: str
) -> str | None:
    """Why some cell-repeat can never run on these nodes (each task runs on one node), or None."""
    alive = [n for n in nodes if n.get("Alive")]
    if not alive:
        return f"the Ray cluster at {address} has no live node"
    seen: set[int] = set()
    for cell, n in needs:
        n = max(n, 1)
        req = ray_request(resource, n)
        if n in seen or any(fits(node, req) for node in alive):
            seen.add(n)
            continue
        short = next(k for k in req if max(float((x.get("Resources") or {}).get(k, 0.0)) for x in alive) < req[k])
        most = max(float((x.get("Resources") or {}).get(short, 0.0)) for x in alive)
        have = "; ".join(
            f"{x.get('NodeManagerAddress', '?')}: "
            + ", ".join(
                f"{k} {float(v):g}" for k, v in sorted((x.get("Resources") or {}).items()) if k in ("CPU", "GPU", "NPU")
            )
            for x in alive
        )
        where = (
            f"no node of the Ray cluster at {address} has {short}"
            if most == 0
            else (f"the most any node of the Ray cluster at {address} has is {most:g}")
        )
        return (
            f"{cell}: needs {req[short]:g} {short} on one node, but {where} (nodes: {have}); "
            f"start nodes that have it, or choose --ray-resource"
        )
    return None


def upload_env(package_dir: str, upload_s: float) -> dict[str, Any]:
    """The runtime_env that ships mtpbench to every node; Ray fails a task whose node cannot set it up in
    `upload_s` (setup_timeout_seconds: Ray's own deadline for the node's download and unpacking)."""
    return {
        "py_modules": [package_dir],
        "excludes": ["__pycache__"],
        "config": {"setup_timeout_seconds": max(math.ceil(upload_s), 1)},
    }


def package_mb(package_dir: str) -> float:
    return (
        sum(p.stat().st_size for p in Path(package_dir).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        / 1e6
    )


__all__ = [
    "ClusterError",
    "Joined",
    "LocalCluster",
    "RayDeadlines",
    "RaySettings",
    "bounded",
    "driver_on_loopback",
    "fit_problem",
    "fits",
    "host_port",
    "join",
    "package_mb",
    "ray_request",
    "upload_env",
    "wait_reachable",
]
