"""The words of where a run's time went (the line `run` prints after the cell-repeats, from
run/cost.py:time_breakdown). Sentences only: the figures are the breakdown's.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["time_text"]


def time_text(path: str, t: Mapping[str, float]) -> str:
    """Wall time, worker time split into start-up, generation and exit, then how the cell-repeats shared
    the time. With several slots: the wait for a device, each cell-repeat's time from the session's start
    until a slot took it, the longest and the mean, never their sum, which grows past the wall time with
    every queued cell-repeat (issue 30), and how busy the device slots were. One at a time (jobs 1) there
    is no device to wait for: a cell-repeat waits for those before it, so the line says the cell-repeats
    ran in turn and how much of the wall time was spent in them (issue 37)."""
    head = (
        f"results: {path}\n"
        f"time: {t['run_wall_s']:.1f} s wall for {int(t['cells'])} cell-repeats; in workers {t['worker_s']:.1f} s = "
        f"start-up {t['startup_s']:.1f} s (engine {t['engine_start_s']:.1f} s) + generation {t['generation_s']:.1f} s"
        f" + exit {t['exit_s']:.1f} s; "
    )
    if t.get("slots", 1.0) <= 1:
        return head + f"one cell-repeat at a time (jobs 1), in workers {100 * t['utilisation']:.0f} % of the wall time"
    return head + (
        f"waiting for a device from the run's start: at most {t['queued_max_s']:.1f} s, "
        f"{t['queued_mean_s']:.1f} s on average per cell-repeat; {int(t['slots'])} device slots busy "
        f"{100 * t['utilisation']:.0f} %"
    )
