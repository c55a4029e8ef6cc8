"""The per-request alarms' payload (judge/signals/per_request.py fills it): requests that accepted nothing over many
verify steps, or every draft at every step. Beside findings/__init__.py, whose Kind enum names them."""

from __future__ import annotations

from dataclasses import dataclass

from mtpbench.judge.findings import Payload


@dataclass(frozen=True, kw_only=True)
class RequestAlarm(Payload):
    """The requests of a cell an alarm names: `requests` how many, `named` the first NAMED ("prompt@repeat"),
    the longest first; `pooled_repeats` the cell-repeats whose requests did it together; `min_steps` the floor
    of verify steps and `min_requests` of requests (together); `steps` the verify steps of the longest request
    named alone, else of the requests together."""

    alarm: str  # "collapse" | "all-accepted"
    requests: int
    named: list[str]
    pooled_repeats: list[int]
    steps: int
    min_steps: int
    min_requests: int
    of_requests: int
    source: str
