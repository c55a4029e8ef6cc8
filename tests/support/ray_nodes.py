"""The Ray clusters the suite starts itself, as a user would start theirs (`ray start ... --block`), started the
one safe way mtpbench starts its own (run/ray/cluster.py): bound to the address given, 127.0.0.1
(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: without it Ray binds a node to every interface and its client server to the
machine's outward address), and demanding a fresh token (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN) that only the
environment carries. And what a test sees of a running cluster instead of trusting it: the listening sockets of
its processes, and what a client without the token gets."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from mtpbench.run.ray import auth as rayauth
from mtpbench.run.ray.keeper import session_members

STARTED = "Ray runtime started"
# `ray start` for a node that joins a head, kept on loopback. Ray 2.60.0 (commit b7f4259e944b) has no switch for
# that on Linux: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps 127.0.0.1 as given (services.py 786-821:
# resolve_ip_for_localhost and get_node_ip_address answer the loopback address while ENABLE_RAY_CLUSTER is off)
# but then refuses any node but a head (scripts.py 1169-1181, "Multi-node Ray clusters are not supported on
# Windows and OSX"); without it, --node-ip-address=127.0.0.1 becomes the machine's outward address
# (scripts.py 855) and the node binds there. Here the refusal is off and the address stays what the switch
# makes it; the node's own processes inherit the switch from the environment.
_JOIN = (
    "import sys; from ray._private import ray_constants, services; "
    "services.get_node_ip_address = lambda address=None: services.get_localhost_ip(); "
    "ray_constants.ENABLE_RAY_CLUSTER = True; "
    "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"
)
# A driver joining the cluster as any client would (ray.init), then asking it something.
_CLIENT = "import sys, ray; ray.init(address=sys.argv[1], log_to_driver=False); print('JOINED', len(ray.nodes()))"


def safe_env(token: str, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a `ray start` of the suite: loopback only, demanding `token`, no address to join."""
    return {**rayauth.cluster_env(os.environ if base is None else base, token), **extra}


def start_node(
    args: Sequence[str], log: Path, env: Mapping[str, str], prefix: Sequence[str] = (), timeout_s: float = 300
) -> subprocess.Popen[bytes]:
    """`ray start ARGS --block` in a session of its own (so that it can be killed whole), once it runs;
    `prefix` wraps it (a mount namespace). Ray's own interpreter: the one running the suite. A node that
    joins a head (no --head) starts through _JOIN, on loopback like the head."""
    ray = ["-m", "ray.scripts.scripts"] if "--head" in args else ["-c", _JOIN]
    command = [*prefix, sys.executable, *ray, "start", *args, "--block", "--disable-usage-stats"]
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=dict(env))
    deadline = time.monotonic() + timeout_s
    while STARTED not in log.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
        time.sleep(0.2)
    return proc


def kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a node and everything it started, as a machine that loses power would stop (`ray stop` would
    stop every Ray of this user; a process-group kill misses the workers, which the raylet puts in groups of
    their own, and `ray start` outlives a SIGTERM by 15 s and more)."""
    while members := session_members(proc.pid):
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    proc.wait()


def listening(pids: Iterable[int]) -> list[str]:
    """Every TCP socket these processes listen on, as ADDRESS:PORT, read from /proc (net/tcp{,6} and the
    processes' open files), not from what Ray says it binds."""
    return sorted(str(listener) for listener in rayauth.listeners(pids))


def off_loopback(pids: Iterable[int]) -> list[str]:
    """The sockets of `pids` that listen beyond loopback (0.0.0.0 and :: are every interface)."""
    return sorted(str(listener) for listener in rayauth.listeners(pids) if not listener.on_loopback)


def client_without_token(address: str, home: Path, seconds: float = 60) -> str:
    """What a client of this machine that has no token gets from the cluster at `address`: "joined", or what
    stopped it. A fresh HOME: Ray would read a token from ~/.ray/auth_token."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in (*rayauth.token_env(""), "RAY_ADDRESS")}
    # Without the switch the client rewrites 127.0.0.1 into the machine's outward address and reaches nothing:
    # it would be kept out by that, not by the cluster.
    env.update(HOME=str(home), **{rayauth.LOOPBACK_ENV: "0"})
    log = home / "client.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CLIENT, address],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        kill_session(proc)
        text = log.read_text(errors="replace")
        return "joined" if "JOINED" in text else f"not let in within {seconds:g} s: {_last_line(text)}"
    text = log.read_text(errors="replace")
    return "joined" if "JOINED" in text else f"refused (exit {proc.returncode}): {_last_line(text)}"


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
