"""File modes shared by every writer of a run folder (standard library only)."""

from __future__ import annotations

import os
from pathlib import Path


def _umask() -> int:
    """The process's umask, read without setting it (setting it to learn it races with threads that create
    files meanwhile); where /proc does not say, the set-and-restore it would otherwise take."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def share_mode(path: str | Path) -> None:
    """The mode open() would have given a file mkstemp made (0600): 0666 less the umask, so that a run's
    other readers (a CI artifact collector, a team's shared runs folder) can read what mtpbench wrote."""
    os.chmod(path, 0o666 & ~_umask())
