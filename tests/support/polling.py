"""The one poll-until-true loop of the tests: a test that waits for another process (a record written, a
process gone, a node up) polls with a deadline through `wait_for`, never with a fixed sleep (a loaded 2-core
box makes every fixed sleep a race)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(pred: Callable[[], T], timeout: float = 60.0, what: str | Callable[[], object] = "timed out waiting") -> T:
    """Poll `pred` every 50 ms until it returns something true, and return that. After `timeout` seconds fail
    with `what` (a callable is asked at that moment: a log's tail, the processes still alive). A `pred` that
    raises fails at once: it can assert that the process it waits on is still running."""
    start = time.monotonic()
    while not (value := pred()):
        if time.monotonic() - start >= timeout:
            raise AssertionError(f"not within {timeout:g} s: {what() if callable(what) else what}")
        time.sleep(0.05)
    return value
