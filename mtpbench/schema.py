"""The version numbers of mtpbench's file formats, in one place, and the one check that reads them.

Standard library only: the worker (which runs inside a build's interpreter without mtpbench's
dependencies) stamps every record with SCHEMA_VERSION, and results.py / baseline.py refuse files of
another version with a message that says which side is out of date (asv-style: "newer, update mtpbench"
vs "older").

Format history
- run schema 1 (mtpbench 0.1): manifest.json + records.jsonl, see results.py.
- baseline schema 1 (mtpbench 0.1): see baseline.py.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

from mtpbench import __version__

SCHEMA_VERSION = 1  # runs: manifest.json and every line of records.jsonl
BASELINE_SCHEMA = 1  # baselines/*.yaml
# A serving cell-repeat whose build returned no per-request spec-decode counts: its acceptance is one pooled
# count of the server's /metrics deltas (mtpbench/engine/serving.py writes it, the evidence stage reads it).
COUNTERS_ONLY = "counters-only"


class _Status(str, Enum):
    """A status written into JSON and shown in words: str() and f-strings give the value ("ok"), never the
    member's name ("CellStatus.OK"), so a status is the same text on disk, in a progress line and in a log."""

    def __str__(self) -> str:
        return str(self.value)


class RunStatus(_Status):
    """Where a whole run stands, in the manifest's `status` (the runner writes it; so do the store's RunWriter
    and the benchmarks' synthetic runs, with the same values)."""

    RUNNING = "running"  # started, or resumed, and not ended (or the runner was killed: --resume finishes it)
    COMPLETE = "complete"  # every cell-repeat ended ok
    FAILED = "failed"  # some cell-repeat failed or timed out (the others went on)
    INTERRUPTED = "interrupted"  # a stop signal, or a bug of the runner, stopped it: every worker is gone


class CellStatus(_Status):
    """Where a cell-repeat stands, in the manifest (the runner writes it, every reader compares with it)."""

    PENDING = "pending"
    RUNNING = "running"
    OK = "ok"  # the worker exited 0 (evidence.py also wants every prompt recorded before it counts it)
    FAILED = "failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"


def schema_problem(value: Any, supported: int, what: str) -> str | None:
    """None when `value` is the supported version, else the sentence that says why the file is refused."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()))
    ):
        shown = "missing" if value is None else f"{value!r}"
        return f"{what} schema: expected an integer version, got {shown[:40]}"
    v = int(value)
    if v == supported:
        return None
    if v > supported:
        return f"{what} schema {v} is newer than mtpbench {__version__} reads ({supported}): update mtpbench to read it"
    return (
        f"{what} schema {v} is older than mtpbench {__version__} reads ({supported}): re-record it with this "
        "version, or read it with the mtpbench that wrote it"
    )
