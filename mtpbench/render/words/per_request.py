"""The words of the per-request alarms (judge/signals/per_request.py) and of the acceptance-histogram table:
requests that accepted nothing over many verify steps, or every draft at every step."""

from __future__ import annotations

from mtpbench.judge.findings.per_request import RequestAlarm
from mtpbench.judge.signals.per_request import MTPBENCH_COUNTERS

__all__ = ["HISTOGRAM_NOTE", "HISTOGRAM_TITLE", "msg_request_alarm", "source_text"]

HISTOGRAM_TITLE = "per-request acceptance: verify steps by drafts accepted (vLLM's acceptance_histogram)"
HISTOGRAM_NOTE = (
    "accepted j = % of the cell's verify steps that accepted exactly j drafts (index j of vLLM's per-request "
    "acceptance_histogram, vllm#48915), pooled over the requests of its complete repeats; from: vLLM's "
    "per-request metrics, or mtpbench's counter deltas around each prompt where the build has none"
)


def source_text(source: str) -> str:
    return "mtpbench counters" if source == MTPBENCH_COUNTERS else "vLLM per-request"


def _who(n: RequestAlarm) -> str:
    pooled = ""
    if n.pooled_repeats:
        reps = ", ".join(str(r) for r in n.pooled_repeats)
        pooled = f" (every request of repeat(s) {reps} together)"
    shown = ", ".join(n.named)
    more = f" and {n.requests - len(n.named)} more" if n.requests > len(n.named) else ""
    return f"{n.requests} of {n.of_requests} request(s){pooled}: {shown}{more}"


def msg_request_alarm(n: RequestAlarm) -> str:
    what = "accepted no draft" if n.alarm == "collapse" else "accepted every draft at every verify step"
    need = f"{n.min_steps} steps" + (f" and {n.min_requests} requests together" if n.min_requests > 1 else "")
    return (
        f"{_who(n)} {what} over {n.steps} verify steps (the alarm needs at least {need}, which a healthy "
        f"drafter does not reach, docs/verdicts.md; counts from {source_text(n.source)})"
    )
