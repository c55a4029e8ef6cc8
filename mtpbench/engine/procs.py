"""Stopping a process and everything it started: a worker or a server leads its own process group
(start_new_session), and vLLM's engine core, TP workers or a stray child holding a log pipe live in it.
The one way mtpbench takes a group down (the runner's workers, the serving job's server). Standard
library only (it runs in the build's interpreter too)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_group_gone(pgid: int, timeout_s: float) -> None:
    t0 = time.perf_counter()
    while group_alive(pgid) and time.perf_counter() - t0 < timeout_s:
        time.sleep(0.1)


def stop_group(proc: subprocess.Popen[str], grace_s: float, kill_wait_s: float = 10.0) -> int | None:
    """SIGTERM the group `proc` leads, give it `grace_s`, then SIGKILL whatever of the group is left (members
    that ignored SIGTERM, or outlived their leader) and wait for the group to be gone; the leader's code."""
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=kill_wait_s)
    wait_group_gone(pgid, kill_wait_s)
    return proc.returncode
