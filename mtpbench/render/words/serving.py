"""The words of the serving workload's findings (judge/signals/serving_summary.py): failed-requests (the server failed
requests under load), count-mismatch (/metrics deltas differ from the per-request sum) and throughput-drop.
Sentences only; the serving table itself is render/serving.py.
"""

from __future__ import annotations

from mtpbench.judge.findings import CountMismatch, FailedRequests, ThroughputDrop

__all__ = ["msg_count_mismatch", "msg_failed_requests", "msg_throughput_drop"]


def msg_failed_requests(n: FailedRequests) -> str:
    died = ", server died during the load" if n.server_died else ""
    first = f": {n.first_error}" if n.first_error else ""
    return f"{n.ok}/{n.total} requests ok ({n.failed} failed, {n.not_finished} not finished{died}){first}"


def msg_count_mismatch(n: CountMismatch) -> str:
    return (
        f"repeat {n.repeat}: /metrics spec-decode deltas {n.metrics_delta} differ from the sum of the "
        f"per-request counts {n.per_request_sum}; the per-request counts are what the verdicts use"
    )


def msg_throughput_drop(n: ThroughputDrop) -> str:
    return (
        f"{n.req_per_s:.2f} req/s vs baseline {n.baseline_req_per_s:.2f} req/s (-{100 * n.drop:.1f} %, "
        f"tolerance {n.tolerance_pct:g} %)"
    )
