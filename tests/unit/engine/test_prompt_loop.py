"""The engine's one prompt loop (engine/records.py) against a stand-in for vllm.LLM, no engine: the records it
writes for a plain repeat, conversations and soak rounds, sequential and batched, key for key in the order
they were written before the loop was one (issue 27), checked against the record schema (schema.py); the test
hook that holds a loop at a known prompt; and the stage's shape (no module handed to another, no helper passed
as a callback)."""

from __future__ import annotations

import ast
import hashlib
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mtpbench import schema
from mtpbench.engine import chat, records, soak
from mtpbench.engine.records import PromptLoop, run_prompts

K = 3
PKG = Path(records.__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parents[2]
BASE = dict(
    records.base_record(
        {"run_id": "R", "cell": "b/eager/stock", "build": "b", "mode": "eager", "variant": "stock", "repeat": 0}
        | {"hash_seed": 0}
    )
)
PROMPTS = [{"id": f"p{i}", "text": f"prompt {i}"} for i in range(4)]


# --- a stand-in for vllm.LLM ------------------------------------------------------------------------------


def _hist(i: int) -> list[int]:
    """Prompt i's acceptance histogram (steps that accepted 0..K drafts); prompt 2 has none (no metrics)."""
    return [] if i == 2 else [1, i, 2, 3 + i]


def _output(rid: str, i: int, text: str) -> SimpleNamespace:
    hist = _hist(i)
    metrics = SimpleNamespace(histogram=hist, num_draft_tokens=K * sum(hist)) if hist else None
    out = SimpleNamespace(token_ids=list(range(5 + i)), finish_reason="length", text=f"answer to {text}"[:200])
    out.spec_decode_metrics = metrics
    return SimpleNamespace(request_id=rid, finished=True, outputs=[out], prompt_token_ids=list(range(3 + i)))


class FakeEngine:
    """llm_engine: add_request / step / has_unfinished_requests / abort_request; two requests end per step,
    the last added first (records come out of index order, as vLLM's may)."""

    def __init__(self, llm: FakeLLM) -> None:
        self.llm = llm
        self.queue: list[tuple[str, Any]] = []

    def add_request(self, rid: str, prompt: Any, sp: Any) -> None:
        self.queue.append((rid, prompt))

    def has_unfinished_requests(self) -> bool:
        return bool(self.queue)

    def abort_request(self, rids: list[str]) -> None:
        self.queue = [q for q in self.queue if q[0] not in rids]

    def step(self) -> list[Any]:
        done, self.queue = self.queue[-2:][::-1], self.queue[:-2]
        return [self.llm.finish(rid, prompt) for rid, prompt in done]


class FakeLLM:
    """Cumulative spec-decode counters that grow by each finished request's histogram, as vLLM's do."""

    def __init__(self) -> None:
        self.totals = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "per_pos": [0] * K}
        self.llm_engine = FakeEngine(self)
        self.sent: list[Any] = []

    def finish(self, rid: str, prompt: Any) -> SimpleNamespace:
        self.sent.append(prompt)
        # A text prompt ending in a digit is that prompt's index; rendered token ids count as prompt 1.
        text = prompt if isinstance(prompt, str) else json.dumps(prompt)
        i = int(text[-1]) if text[-1].isdigit() else 1
        hist = _hist(i)
        self.totals["num_drafts"] += sum(hist)
        self.totals["num_draft_tokens"] += K * sum(hist)
        self.totals["num_accepted_tokens"] += sum(j * c for j, c in enumerate(hist))
        self.totals["per_pos"] = [a + sum(hist[p + 1 :]) for p, a in enumerate(self.totals["per_pos"])]
        return _output(rid, i, text)

    def generate(self, prompts: list[Any], sp: Any, use_tqdm: bool = False) -> list[Any]:
        return [self.finish("gen", p) for p in prompts]

    def get_metrics(self) -> list[Any]:
        t = self.totals
        return [
            SimpleNamespace(name="vllm:spec_decode_num_drafts", value=t["num_drafts"], values=None),
            SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", value=t["num_draft_tokens"], values=None),
            SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=t["num_accepted_tokens"], values=None),
            SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", value=None, values=t["per_pos"]),
            SimpleNamespace(name="vllm:kv_cache_usage_perc", value=0.25, values=None),
        ]

    def get_tokenizer(self) -> Any:
        return SimpleNamespace(
            apply_chat_template=lambda messages, **kw: " | ".join(m["content"] for m in messages),
            encode=lambda text, add_special_tokens: [len(text)],
        )


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """wall_s and uptime_s are measurements: a clock that stands still makes them 0 and the records exact."""
    monkeypatch.setattr(time, "perf_counter", lambda: 100.0)
    monkeypatch.delenv(records.TEST_HOLD_ENV, raising=False)


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# Every prompt record's keys, in the order the five loops wrote them before they were one (commit 4442c42).
BASE_KEYS = ["schema", "run_id", "cell", "build", "mode", "variant", "repeat", "hash_seed", "attempt"]
PROMPT_HEAD = ["type", "prompt_id", "prompt_index", "num_prompt_tokens", "num_generated_tokens", "finish_reason"]
PROMPT_HEAD += ["output_sha256", "output_head", "num_drafts", "num_draft_tokens", "num_accepted_tokens"]
PROMPT_HEAD += ["accepted_per_pos"]
PROMPT_TAIL = ["wall_s", "source", "per_request"]


def test_sequential_counts_are_the_counters_around_each_prompt(tmp_path: Path, frozen_clock: None) -> None:
    path = tmp_path / "records.jsonl"
    llm = FakeLLM()
    assert run_prompts(PromptLoop(llm, None, K, BASE, str(path)), PROMPTS, batched=False) == {
        "prompt_mode": "sequential"
    }
    recs = _read(path)
    assert [list(r) for r in recs] == [BASE_KEYS + PROMPT_HEAD + PROMPT_TAIL] * 4
    assert [r["prompt_index"] for r in recs] == [0, 1, 2, 3] and {r["source"] for r in recs} == {"counters"}
    assert recs[1]["accepted_per_pos"] == [1 + 2 + 4, 2 + 4, 4] and recs[1]["num_drafts"] == 1 + 1 + 2 + 4
    assert recs[1]["per_request"] == {k: recs[1][k] for k in ("num_drafts", "num_draft_tokens")} | {
        "num_accepted_tokens": recs[1]["num_accepted_tokens"],
        "accepted_per_pos": recs[1]["accepted_per_pos"],
    }
    assert recs[2]["per_request"] is None and recs[2]["num_drafts"] == 0  # no histogram, no counts
    assert recs[0] == {
        **BASE,
        "type": "prompt",
        "prompt_id": "p0",
        "prompt_index": 0,
        "num_prompt_tokens": 3,
        "num_generated_tokens": 5,
        "finish_reason": "length",
        "output_sha256": hashlib.sha256(json.dumps([0, 1, 2, 3, 4]).encode()).hexdigest(),
        "output_head": "answer to prompt 0",
        "num_drafts": 6,
        "num_draft_tokens": 18,
        "num_accepted_tokens": 0 + 0 + 4 + 9,
        "accepted_per_pos": [5, 5, 3],
        "wall_s": 0.0,
        "source": "counters",
        "per_request": {
            "num_drafts": 6,
            "num_draft_tokens": 18,
            "num_accepted_tokens": 13,
            "accepted_per_pos": [5, 5, 3],
        },
    }


def test_batched_records_each_request_as_it_finishes_and_cross_checks_the_counters(
    tmp_path: Path, frozen_clock: None
) -> None:
    path = tmp_path / "records.jsonl"
    end = run_prompts(PromptLoop(FakeLLM(), None, K, BASE, str(path)), PROMPTS, batched=True)
    recs = _read(path)
    assert [r["prompt_index"] for r in recs] == [3, 2, 1, 0]  # as they finished, not in index order
    assert [list(r) for r in recs] == [BASE_KEYS + PROMPT_HEAD + PROMPT_TAIL] * 4
    assert {r["source"] for r in recs} == {"per_request"} and all(r["per_request"] == _counts(r) for r in recs)
    assert list(end) == ["prompt_mode", "batch_counters", "batch_counters_match", "prompts_without_spec_metrics"]
    assert end["batch_counters_match"] is True and end["prompts_without_spec_metrics"] == ["p2"]
    assert end["batch_counters"]["accepted_per_pos"] == [sum(r["accepted_per_pos"][p] for r in recs) for p in range(K)]


def _counts(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos")}


def test_a_conversation_is_one_prompt_record_with_its_turns(tmp_path: Path, frozen_clock: None) -> None:
    path = tmp_path / "records.jsonl"
    llm = FakeLLM()
    convs = [{"id": "c0", "text": "first 1", "followups": ["second 3"]}]
    end = chat.run_conversations(PromptLoop(llm, None, K, BASE, str(path)), convs, "raw")
    assert end == {"prompt_mode": "sequential", "conversations": True}
    (rec,) = _read(path)
    head = PROMPT_HEAD[: PROMPT_HEAD.index("accepted_per_pos") + 1]
    assert list(rec) == BASE_KEYS + head + ["turns", *PROMPT_TAIL]
    assert rec["turns"] == 2 and rec["num_generated_tokens"] == 6 + 8  # both answers (prompts ending 1 and 3)
    assert rec["per_request"] == _counts(rec)  # both turns' per-request counts = the counters around both
    assert llm.sent == ["first 1", "first 1answer to first 1\n\nsecond 3"]  # the answer before the next turn


@pytest.mark.parametrize("batched", [False, True])
def test_soak_rounds_carry_round_and_uptime_and_end_with_round_end(
    tmp_path: Path, frozen_clock: None, batched: bool
) -> None:
    path = tmp_path / "records.jsonl"
    job = {"prompts": PROMPTS[:2], "workload": {"kind": "soak", "rounds": 2, "order": ["A"], "concurrency": 1}}
    end = soak.run_soak(FakeLLM(), None, job, K, BASE, str(path), batched)
    assert end == {"prompt_mode": "batched" if batched else "sequential", "rounds_done": 2, "stalled_round": None}
    recs = _read(path)
    assert [r["type"] for r in recs] == ["prompt", "prompt", "round_end"] * 2
    prompt_keys = [*BASE_KEYS, "round", *PROMPT_HEAD, *PROMPT_TAIL, "uptime_s"]
    assert all(list(r) == prompt_keys for r in recs if r["type"] == "prompt")
    round_keys = ["round", "type", "wall_s", "deadline_s", "set", "prompts", "stalled", "unfinished"]
    round_keys += ["uptime_start_s", "uptime_s", "kv_cache_usage_max", "prefix_cache_queries", "prefix_cache_hits"]
    assert list(recs[2]) == [*BASE_KEYS, *round_keys, "num_preemptions"]
    assert recs[2]["kv_cache_usage_max"] == 0.25 and recs[5]["round"] == 1 and recs[2]["unfinished"] == []


def _keys_fit(record: dict[str, Any], typed: Any) -> bool:
    return typed.__required_keys__ <= set(record) <= typed.__required_keys__ | typed.__optional_keys__


def test_what_the_loop_writes_fits_the_record_schema(tmp_path: Path, frozen_clock: None) -> None:
    path = tmp_path / "records.jsonl"
    run_prompts(PromptLoop(FakeLLM(), None, K, BASE, str(path)), PROMPTS, batched=True)
    chat.run_conversations(PromptLoop(FakeLLM(), None, K, BASE, str(path)), [{"id": "c", "text": "t 1"}], "raw")
    soak.run_soak(FakeLLM(), None, {"prompts": PROMPTS, "workload": {"rounds": 1}}, K, BASE, str(path), False)
    typed = {"prompt": schema.PromptRecord, "round_end": schema.RoundEndRecord}
    assert all(_keys_fit(r, typed[r["type"]]) for r in _read(path))
    assert set(schema.RecordBase.__required_keys__) == set(BASE) and list(BASE) == BASE_KEYS


def test_a_serving_run_fits_the_record_schema() -> None:
    # Frozen records of the real serving writer (counters-only): request, load, the pooled prompt, cell ends.
    typed = {
        "cell_start": schema.CellStartRecord,
        "request": schema.RequestRecord,
        "load": schema.LoadRecord,
        "prompt": schema.PromptRecord,
        "cell_end": schema.CellEndRecord,
    }
    recs = _read(TESTS / "data" / "runs" / "counters-only-serving" / "records.jsonl")
    assert {r["type"] for r in recs} == set(typed)
    assert [r["type"] for r in recs if not _keys_fit(r, typed[r["type"]])] == []


# --- the test hook ------------------------------------------------------------------------------------------


def test_the_hold_stops_the_loop_after_n_records_until_the_file_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, release = tmp_path / "records.jsonl", tmp_path / "go"
    monkeypatch.setenv(records.TEST_HOLD_ENV, f"1:{release}")
    held = threading.Event()
    hold = records._wait_for

    def holding(until: Path) -> None:
        # The loop has stopped at its hold: nothing more can be written until `until` exists.
        assert until == release
        held.set()
        hold(until)

    monkeypatch.setattr(records, "_wait_for", holding)
    for batched in (False, True):  # batched: held between two records of one engine step
        path.unlink(missing_ok=True)
        release.unlink(missing_ok=True)
        held.clear()
        loop = PromptLoop(FakeLLM(), None, K, BASE, str(path))
        t = threading.Thread(target=run_prompts, args=(loop, PROMPTS, batched), daemon=True)
        t.start()
        assert held.wait(10), "the loop never reached its hold"
        assert len(_read(path)) == 1 and t.is_alive()
        release.touch()
        t.join(10)
        assert not t.is_alive() and len(_read(path)) == 4


def test_the_hold_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(records.TEST_HOLD_ENV, raising=False)
    assert PromptLoop(None, None, K, BASE, "r").hold is None
    monkeypatch.setenv(records.TEST_HOLD_ENV, "2:/x/y")
    assert PromptLoop(None, None, K, BASE, "r").hold == (2, Path("/x/y"))


# --- the stage's shape --------------------------------------------------------------------------------------


def _package_files() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def test_no_module_hands_itself_over_and_serving_takes_no_callbacks() -> None:
    # Before issue 27 the worker passed sys.modules[__name__] to soak and chat, and its emit / append_record /
    # fingerprint to serving: an import circle no layering test could see.
    assert [p.name for p in _package_files() if "sys.modules[__name__]" in p.read_text()] == []
    import inspect

    from mtpbench.engine import serving

    assert list(inspect.signature(serving.run_serving_job).parameters) == ["job"]
    assert "w" not in inspect.signature(soak.run_soak).parameters


def test_no_private_engine_name_is_imported_across_modules() -> None:
    bad = []
    for path in [*_package_files(), *sorted(TESTS.rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mtpbench.engine"):
                bad += [f"{path.name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert bad == []
