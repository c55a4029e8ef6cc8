"""Reaching a Ray cluster in bounded time: the cluster mtpbench starts itself when no address is named, the
deadline of every wait on Ray, and the check, before anything is submitted, that each cell-repeat fits a node.

With no `--address`, `RAY_ADDRESS` or `ray_address`, mtpbench starts its own single-node cluster (`ray start
--head --block`) on 127.0.0.1, in a temp folder of its own, and stops it when the run ends. It never calls
`ray.init()` without an address: that joins whatever cluster the last `ray start` here wrote to
/tmp/ray/ray_current_cluster and, if that cluster is gone, retries for ever (issue 23's hang). Ray binds a
node to every interface on the machine's outward address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0; an
unauthenticated cluster beyond loopback runs anyone's code, so the switch is set for the cluster and, while
joined to it, for the driver (which would otherwise rewrite 127.0.0.1 into the outward address). Loopback keeps
the network out, not the machine's other users: the cluster also demands a fresh token, handed to it and to the
driver through the environment only (run/ray/auth.py). A cluster the user names is looked at before it is joined:
the user's token is presented when its GCS demands one, and one warning line says when it demands none or is
reachable beyond loopback.

The cluster runs in a session led by a keeper (run/ray/keeper.py, `python -m mtpbench.run.ray.keeper`) whose
stdin is a pipe from mtpbench: when it closes (the run ended, a signal stopped it, or mtpbench died, even by
SIGKILL) the keeper SIGKILLs its session. A session, not a process group: Ray's raylet puts each worker in a
group of its own (a group kill left idle workers running, found by tests/unit/run/test_ray_deadlines.py).

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

# By its full path: `from mtpbench.run.ray import keeper as raykeeper` also imports the package, whose face names this
# module.
import mtpbench.run.ray.keeper as raykeeper
from mtpbench.errors import ClusterError, UserError
from mtpbench.run.control import RunInterrupted
from mtpbench.run.ray import auth as rayauth
from mtpbench.run.ray.keeper import session_members

T = TypeVar("T")
LOOPBACK_ENV = rayauth.LOOPBACK_ENV
STARTED = "Ray runtime started"  # what `ray start` prints once its GCS and raylet run
STOP_WAIT_S = 10.0  # for the keeper to have killed the cluster, then for what is left to die of SIGKILL


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
            start_s=cfg.ray_start_timeout_s,
            connect_s=cfg.ray_connect_timeout_s,
            upload_s=cfg.ray_upload_timeout_s,
            place_s=cfg.ray_place_timeout_s,
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
    """RunInterrupted (no run folder yet) once a stop signal has been noted."""
    if caught:
        raise RunInterrupted(caught[0], None)


def bounded(call: Callable[[], T], seconds: float, *, what: str, key: str, caught: list[int]) -> T:
    """`call()` in a daemon thread, waited for at most `seconds`: a Ray call that blocks (ray.init retries a
    GCS that does not answer for ever) cannot be interrupted in place. On a deadline or a stop signal the
    thread is abandoned; the process exits soon after, and the thread with it."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="ray-call", daemon=True)
    end = time.monotonic() + seconds
    thread.start()
    while thread.is_alive():
        check_stop(caught)
        if time.monotonic() > end:
            raise ClusterError(f"{what}: no answer within {seconds:g} s ({key})")
        thread.join(0.05)
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
    host_and_port = host_port(address)
    if host_and_port is None:
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
            with socket.create_connection(host_and_port, timeout=min(left, 2.0)):
                return
        except OSError as exc:
            last = exc.strerror or str(exc)
        time.sleep(min(0.25, max(end - time.monotonic(), 0.0)))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
        self.token: str | None = None  # what every client of the cluster must present; never logged

    def start(self) -> str:
        """Start the head and wait until it runs; its address. Stops what it started on any failure."""
        check_stop(self.caught)
        self.tmp = Path(tempfile.mkdtemp(prefix="mtpb-ray-", dir=_short_tmp()))
        log_fd, log = tempfile.mkstemp(prefix="mtpbench-ray-head-", suffix=".log")
        self.log = Path(log)
        port = _free_port()
        self.token = rayauth.new_token()
        try:
            self.proc = self._launch_keeper(self._ray_start(port, self.tmp), log_fd, self.token)
        finally:
            os.close(log_fd)
        try:
            self._wait_started(self.proc, self.log)
        except BaseException as exc:
            self.stop(keep_log=isinstance(exc, ClusterError))
            raise
        self.address = f"127.0.0.1:{port}"
        return self.address

    @staticmethod
    def _ray_start(port: int, temp_dir: Path) -> list[str]:
        """`ray start` for a head on loopback that runs until it is killed (--block), in its own temp folder."""
        return [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            f"--temp-dir={temp_dir}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--block",
        ]

    def _launch_keeper(self, ray_start: list[str], log_fd: int, token: str) -> subprocess.Popen[bytes]:
        """The keeper, leading a session of its own, runs `ray start`; its stdin is the pipe whose EOF stops it.
        The token travels in its environment, which `ray start` and every process of the cluster inherit."""
        env = rayauth.cluster_env(os.environ, token)
        keeper = [sys.executable, "-m", raykeeper.__name__, str(self.tmp), *ray_start]
        return subprocess.Popen(
            keeper,
            stdin=subprocess.PIPE,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )

    def client_env(self) -> dict[str, str | None]:
        """The variables a client of the started cluster needs to present its token."""
        if self.token is None:
            raise ClusterError("the local Ray cluster was not started: it has no token yet")
        return rayauth.token_env(self.token)

    def _wait_started(self, keeper: subprocess.Popen[bytes], log: Path) -> None:
        """Until `ray start` says the runtime started; a ClusterError if it exits first or the deadline passes."""
        t0 = time.monotonic()
        while STARTED not in log.read_text(errors="replace"):
            check_stop(self.caught)
            if keeper.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise ClusterError(
                    f"the local Ray cluster did not start (`ray start` exited with code "
                    f"{keeper.returncode}: {tail[0]}); its log: {log}"
                )
            if time.monotonic() - t0 > self.deadline_s:
                raise ClusterError(
                    f"the local Ray cluster did not start within {self.deadline_s:g} s "
                    f"(ray_start_timeout_s); its log: {log}"
                )
            time.sleep(0.1)

    def stop(self, keep_log: bool = False) -> None:
        """Take the whole cluster down (idempotent); its temp folder goes, its log stays only if asked."""
        keeper, self.proc = self.proc, None
        if keeper is not None:
            _stop_keeper(keeper)
            _kill_session(keeper.pid)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        if self.log is not None and not keep_log:
            self.log.unlink(missing_ok=True)
            self.log = None


def _stop_keeper(keeper: subprocess.Popen[bytes]) -> None:
    """Close the keeper's stdin (it kills its session and exits); killed itself if it does not in time."""
    if keeper.stdin is not None:
        keeper.stdin.close()
    try:
        keeper.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        keeper.kill()
        keeper.wait()


def _kill_session(session: int) -> None:
    """What the keeper could not reach (it was killed, or a member forked past its sweeps), for a while."""
    end = time.monotonic() + STOP_WAIT_S
    while (left := session_members(session)) and time.monotonic() < end:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


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
    warning: str | None = None  # a named cluster that anyone may use (run/ray/auth.py ClusterSafety)

    def leave(self, ray: Any) -> None:
        """Leave the cluster; stop it if mtpbench started it (a cluster the user started keeps running)."""
        try:
            if ray.is_initialized():
                ray.shutdown()
        finally:
            self.restore()
            if self.cluster is not None:
                self.cluster.stop()


def join(ray: Any, settings: RaySettings) -> Joined:
    """Start (no address) or reach the cluster, check that every cell-repeat fits one of its nodes, and join
    it with mtpbench as the job's py_modules; each wait bounded. On any failure what was started is stopped."""
    joined = Joined(settings.address or "")
    try:
        _start_or_reach(joined, settings)
        # Not the driver's logging: a Ray call in a thread warns that it cannot set a SIGTERM handler (good:
        # the run's own handlers stay), and the retries of a lost GCS are Ray's lines, not mtpbench's.
        logging.getLogger("ray").setLevel(logging.ERROR)
        nodes = _connect(ray, joined.address, settings)
        problem = fit_problem(nodes, settings.resource.upper(), settings.needs, joined.address)
        if problem:
            raise UserError(problem)  # before mtpbench is shipped or a run folder exists
        _ship_mtpbench(ray, joined.address, settings)
    except BaseException:
        joined.leave(ray)
        raise
    return joined


def _start_or_reach(joined: Joined, settings: RaySettings) -> None:
    """mtpbench's own cluster started (no address named), or the named one answering on its port."""
    if settings.address is None:
        joined.cluster = LocalCluster(settings.deadlines.start_s, settings.caught)
        joined.address = joined.cluster.start()
        joined.restore = driver_on_loopback()
        joined.restore = _both(joined.restore, rayauth.driver_env(joined.cluster.client_env()))
    else:
        wait_reachable(settings.address, settings.deadlines.connect_s, settings.caught)
        joined.warning, joined.restore = _look_before_joining(settings)


def _both(first: Callable[[], None], second: Callable[[], None]) -> Callable[[], None]:
    """One undo for two: the later one undone first."""

    def undo() -> None:
        try:
            second()
        finally:
            first()

    return undo


def _look_before_joining(settings: RaySettings) -> tuple[str | None, Callable[[], None]]:
    """A named cluster looked at (bounded) before it is joined: the warning a run gives about it, and what
    undoes the driver's token mode, set when its GCS demands a token (Ray presents a token to an address the
    user names only when RAY_AUTH_MODE=token says so: ray/_private/worker.py init)."""
    address = settings.address or ""
    host_and_port = host_port(address)
    if host_and_port is None:  # auto, ray://...: only Ray resolves it, and Ray's own rules apply
        return None, lambda: None
    safety = bounded(
        lambda: rayauth.assess(address, *host_and_port),
        settings.deadlines.connect_s,
        what=f"looking at the Ray cluster at {address}",
        key="ray_connect_timeout_s",
        caught=settings.caught,
    )
    # A GCS on loopback alone was started with the loopback switch: its nodes registered as 127.0.0.1, which
    # this driver must keep (Ray would rewrite it into the outward address and reach nothing). A GCS that
    # listens beyond loopback registered its nodes at the outward address: Ray's own rewrite finds them.
    restore = driver_on_loopback() if safety.exposed is None else (lambda: None)
    if not safety.demands_token:
        return safety.warning(), restore
    try:
        return safety.warning(), _both(restore, _present_user_token(address))
    except BaseException:
        restore()
        raise


def _present_user_token(address: str) -> Callable[[], None]:
    """This driver in token mode with the user's token, checked against the cluster first; what undoes it."""
    token = rayauth.user_token()
    if token is None:
        raise UserError(
            f"the Ray cluster at {address} demands a token (token authentication) and none is set here: set "
            f"{rayauth.TOKEN_ENV}, or {rayauth.TOKEN_PATH_ENV} to a file that holds it (Ray also reads "
            "~/.ray/auth_token)"
        )
    if rayauth.gcs_answer(address, token) is rayauth.GcsAnswer.REFUSED:
        raise UserError(
            f"the Ray cluster at {address} refuses the token set here ({rayauth.TOKEN_ENV}, "
            f"{rayauth.TOKEN_PATH_ENV} or ~/.ray/auth_token): it is not that cluster's token"
        )
    return rayauth.driver_env({rayauth.AUTH_MODE_ENV: "token"})


def _init(ray: Any, address: str, **options: Any) -> Any:
    return ray.init(address=address, log_to_driver=False, configure_logging=False, **options)


def _connect(ray: Any, address: str, settings: RaySettings) -> list[dict[str, Any]]:
    """Join the cluster (without mtpbench yet) and list its nodes; a bad address is bad input."""
    connect_s, caught = settings.deadlines.connect_s, settings.caught
    try:
        bounded(
            lambda: _init(ray, address),
            connect_s,
            what=f"joining the Ray cluster at {address}",
            key="ray_connect_timeout_s",
            caught=caught,
        )
        nodes: list[dict[str, Any]] = bounded(
            ray.nodes,
            connect_s,
            what=f"listing the nodes of the Ray cluster at {address}",
            key="ray_connect_timeout_s",
            caught=caught,
        )
    except ValueError as exc:
        raise UserError(f"Ray cluster address {address!r}: {exc}") from None
    except (ConnectionError, RuntimeError) as exc:
        raise ClusterError(f"cannot join the Ray cluster at {address}: {str(exc).splitlines()[0]}") from None
    return nodes


def _ship_mtpbench(ray: Any, address: str, settings: RaySettings) -> None:
    """Join again with mtpbench as the job's py_modules: apart, the upload has a deadline of its own."""
    import mtpbench

    deadlines, caught = settings.deadlines, settings.caught
    bounded(
        ray.shutdown,
        deadlines.connect_s,
        what="leaving the Ray cluster",
        key="ray_connect_timeout_s",
        caught=caught,
    )
    package = str(Path(mtpbench.__file__).resolve().parent)
    bounded(
        lambda: _init(ray, address, runtime_env=upload_env(package, deadlines.upload_s)),
        deadlines.upload_s,
        what=f"shipping mtpbench ({package_mb(package):.1f} MB, py_modules) to the Ray cluster at {address}",
        key="ray_upload_timeout_s",
        caught=caught,
    )


# --- what a cell-repeat asks of a node --------------------------------------------------------------------


def ray_request(resource: str, n: int) -> dict[str, float]:
    """The resources one task asks for: its devices, and a CPU for the worker next to a GPU or NPU."""
    if resource == "CPU":
        return {"CPU": float(n)}
    return {resource: float(n), "CPU": 1.0}


def _has(node: Mapping[str, Any], resource: str) -> float:
    """How much of `resource` a node of `ray.nodes()` has (0 when it has none)."""
    return float((node.get("Resources") or {}).get(resource, 0.0))


def fits(node: Mapping[str, Any], request: Mapping[str, float]) -> bool:
    return bool(node.get("Alive")) and all(_has(node, resource) >= n for resource, n in request.items())


def _node_summary(node: Mapping[str, Any]) -> str:
    """`ADDRESS: CPU 8, GPU 2`: a node's devices, as a refusal names them."""
    devices = sorted((node.get("Resources") or {}).items())
    have = ", ".join(f"{resource} {float(n):g}" for resource, n in devices if resource in ("CPU", "GPU", "NPU"))
    return f"{node.get('NodeManagerAddress', '?')}: {have}"


def fit_problem(
    nodes: Sequence[Mapping[str, Any]], resource: str, needs: Sequence[tuple[str, int]], address: str
) -> str | None:
    """Why some cell-repeat can never run on these nodes (each task runs on one node), or None."""
    alive = [node for node in nodes if node.get("Alive")]
    if not alive:
        return f"the Ray cluster at {address} has no live node"
    placeable: set[int] = set()  # device counts some node can take: each is checked once
    for cell, devices in needs:
        devices = max(devices, 1)
        request = ray_request(resource, devices)
        if devices in placeable or any(fits(node, request) for node in alive):
            placeable.add(devices)
            continue
        short = next(key for key in request if max(_has(node, key) for node in alive) < request[key])
        most = max(_has(node, short) for node in alive)
        if most == 0:
            where = f"no node of the Ray cluster at {address} has {short}"
        else:
            where = f"the most any node of the Ray cluster at {address} has is {most:g}"
        return (
            f"{cell}: needs {request[short]:g} {short} on one node, but {where} "
            f"(nodes: {'; '.join(_node_summary(node) for node in alive)}); "
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
    """What shipping the package costs, in MB (what a py_modules upload carries: no __pycache__)."""
    files = [p for p in Path(package_dir).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return sum(p.stat().st_size for p in files) / 1e6


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
    "session_members",
    "upload_env",
    "wait_reachable",
]
