"""The keeper of the Ray cluster mtpbench starts itself (run/ray/cluster.py's LocalCluster): the leader of the
cluster's session, run as `python -m mtpbench.run.ray.keeper TEMP_DIR RAY_START_COMMAND...`.

It runs `ray start ... --block` and waits for the first of two endings, the only ways out:
- EOF on its stdin, a pipe from mtpbench: the run ended and mtpbench closed it, or mtpbench died (even by
  SIGKILL, the kernel closes the pipe). The keeper kills every process of its session and removes the
  cluster's temp folder, as mtpbench would have had it lived (the head's log is kept); exit 0.
- `ray start` exiting by itself: the keeper kills what is left of the session and exits with its code.
A session, not a process group: Ray's raylet puts each worker in a group of its own, but not in a session
of its own (a group kill left idle workers running, found by tests/unit/run/test_ray_deadlines.py).

Standard library only, and nothing of mtpbench: the keeper lives as long as the cluster, and this package's
face (run/__init__.py) imports its modules only when asked for one of their names.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

SWEEPS = 50  # passes over /proc until one finds nobody: a member may fork while it is being killed
EOF = "eof"  # what the stdin watcher reports
RAY_ENDED = "ray-ended"  # what the `ray start` watcher reports


def session_of(pid: int) -> int | None:
    """The session id of a live (not zombie) process, from /proc; None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    state, session = fields[0], fields[3]
    return None if state == "Z" else int(session)


def session_members(session: int) -> list[int]:
    """Live (not zombie) processes of `session`, its leader included."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and session_of(int(entry)) == session]


def sweep(session: int) -> None:
    """SIGKILL every live process of `session` except this one, again until a pass finds nobody."""
    me = os.getpid()
    for _ in range(SWEEPS):
        killed = 0
        for pid in session_members(session):
            if pid == me:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:  # gone meanwhile, or not ours to kill
                pass
        if not killed:
            return


def _report_eof(fd: int, endings: queue.Queue[tuple[str, int]]) -> None:
    # os.read, not sys.stdin: a thread blocked in a buffered read holds the buffer's lock, which the
    # interpreter's shutdown would wait for. An unreadable stdin counts as EOF: mtpbench could no longer
    # say when to stop, and a cluster nobody can stop is the one outcome the keeper exists to prevent.
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass
    endings.put((EOF, 0))


def _report_ray_end(ray: subprocess.Popen[bytes], endings: queue.Queue[tuple[str, int]]) -> None:
    endings.put((RAY_ENDED, ray.wait()))


def keep(temp_dir: Path, ray_start: list[str], stdin_fd: int = 0) -> int:
    """Run `ray_start` until it ends or `stdin_fd` reaches EOF (whichever comes first), then take its session
    down; the exit code to leave with. The session swept is this process's when it leads one (as mtpbench
    starts it); otherwise, as when a test calls it, only `ray_start`'s process is killed."""
    ray = subprocess.Popen(ray_start, stdin=subprocess.DEVNULL)
    endings: queue.Queue[tuple[str, int]] = queue.Queue()
    threading.Thread(target=_report_ray_end, args=(ray, endings), name="ray-start", daemon=True).start()
    threading.Thread(target=_report_eof, args=(stdin_fd, endings), name="stdin", daemon=True).start()
    ending, code = endings.get()  # the first ending is the one way out; a later one changes nothing
    if os.getsid(0) == os.getpid():
        sweep(os.getpid())
    elif ray.poll() is None:
        ray.kill()
    ray.wait()
    if ending == EOF:
        shutil.rmtree(temp_dir, ignore_errors=True)
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        sys.stderr.write("usage: python -m mtpbench.run.ray.keeper TEMP_DIR RAY_START_COMMAND...\n")
        return 2
    return keep(Path(args[0]), args[1:])


if __name__ == "__main__":
    # At once, without the interpreter's shutdown: a watcher thread may still be blocked in a read or a wait.
    os._exit(main())
