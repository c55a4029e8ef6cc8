"""How a run is steered from outside: the stop signals it catches and the exit codes they give, the run
folder's lock, which cell-repeats a resume runs again, and the command line's execution options."""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtpbench.schema import CellStatus

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LOCK = ".lock"
# What a resume runs again: every cell-repeat that did not end ok (`running`: the runner itself was killed).
RERUN = (CellStatus.PENDING, CellStatus.RUNNING, CellStatus.FAILED, CellStatus.TIMEOUT, CellStatus.INTERRUPTED)


class RunInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM/SIGHUP stopped the run: every worker is gone and the manifest says `interrupted`. No
    path: the signal came before a run folder existed (while a Ray cluster was started or reached)."""

    def __init__(self, signum: int, path: Path | None) -> None:
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
