"""The engine's write side of records.jsonl, in one place: progress events on stdout, the append of a record
(whole, under a lock, fsync'ed), the keys every record starts with, a prompt record, the spec-decode counts
around a prompt or from its per-request metrics, and the one prompt loop (PromptLoop) that turns prompts into
prompt records, one at a time (`sequential`) or all through the engine's step loop (`batched`). The worker's
plain repeats (run_prompts), its conversations (chat.py) and its soak rounds (soak.py) run that loop; the
serving workload (serving.py) writes its records through the same helpers.

Standard library only at module level, mtpbench.schema apart (the worker runs in the build's interpreter);
vLLM's objects come in as arguments. Every record is appended as it is made, so a crash loses at most the
prompt in flight.

Test hook (off by default): MTPBENCH_TEST_HOLD="N:PATH" makes a prompt loop that has appended N prompt
records wait, before it goes on, until PATH exists. tests/engine/test_runner_engine.py holds a repeat there to
stop the run at a known point instead of racing the engine (in a batched repeat every record may come in one
step). Unset, it is read once per loop and costs one comparison per prompt.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from mtpbench.schema import SCHEMA_VERSION, PromptRecord, RecordBase, SpecCounts, TornMark

EVENT_PREFIX = "@@mtpbench "
TEST_HOLD_ENV = "MTPBENCH_TEST_HOLD"
COUNT_KEYS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


# --- events and appends -------------------------------------------------------------------------------------


def emit(event: str, **fields: Any) -> None:
    """One progress event on stdout, for the runner (a line starting with EVENT_PREFIX)."""
    sys.stdout.write(EVENT_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def _write_all(fd: int, data: bytes) -> None:
    # os.write may write fewer bytes than asked (signals, quotas, pipes, nearly full disks): loop, and let
    # an OSError (ENOSPC, EIO…) propagate so that the cell ends instead of losing a record quietly.
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view = view[n:]


def append_record(path: str, record: Any) -> None:
    """Append one JSON line to records.jsonl, completely, under an exclusive lock (see append_lines)."""
    append_lines(path, (json.dumps(record, separators=(",", ":")) + "\n").encode())


def append_lines(path: str, lines: bytes) -> None:
    """Append whole lines (ending in a newline) to records.jsonl, completely, under an exclusive lock.

    Workers of one run may share the file (--jobs), so the lock keeps lines whole and in one piece each.
    If the file does not end in a newline, a crash cut its last line off: the new lines then start on a
    line of their own, after a `torn` mark that tells the loader the cut-off line is known damage, not garbage.
    """
    if not lines.endswith(b"\n"):
        lines += b"\n"
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            tail = os.pread(fd, min(size, 1 << 20), max(size - (1 << 20), 0))
            cut = len(tail) - tail.rfind(b"\n") - 1 if b"\n" in tail or len(tail) == size else None
            mark: TornMark = {"schema": SCHEMA_VERSION, "type": "torn", "bytes": cut}
            lines = b"\n" + (json.dumps(mark, separators=(",", ":")) + "\n").encode() + lines
        _write_all(fd, lines)
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the lock


# --- the keys of a record -----------------------------------------------------------------------------------


def base_record(job: dict[str, Any]) -> RecordBase:
    """The keys every record of the job's cell-repeat starts with."""
    return {
        "schema": SCHEMA_VERSION,
        "run_id": job["run_id"],
        "cell": job["cell"],
        "build": job["build"],
        "mode": job["mode"],
        "variant": job["variant"],
        "repeat": job["repeat"],
        "hash_seed": job["hash_seed"],
        # A resumed run re-runs a repeat as a new attempt; readers keep only the manifest's attempt.
        "attempt": int(job.get("attempt", 1)),
    }


def prompt_record(base: dict[str, Any], index: int, prompt: dict[str, Any], output: Any) -> dict[str, Any]:
    """The first keys of an offline prompt record, those that do not depend on how its counts were read
    (`output`: vLLM's RequestOutput); the counts, wall_s, source and per_request follow (PromptLoop)."""
    out = output.outputs[0]
    token_ids = list(out.token_ids)
    return {
        **base,
        "type": "prompt",
        "prompt_id": prompt["id"],
        "prompt_index": index,
        "num_prompt_tokens": len(output.prompt_token_ids or []),
        "num_generated_tokens": len(token_ids),
        "finish_reason": out.finish_reason,
        "output_sha256": hashlib.sha256(json.dumps(token_ids).encode()).hexdigest(),
        "output_head": out.text[:120],
        # A context sweep's prompt (engine/context.py) says its bucket: the shared context's tokens before it.
        **({"context_tokens": prompt["context_tokens"]} if prompt.get("context_tokens") is not None else {}),
    }


# --- counts -------------------------------------------------------------------------------------------------


def zero_counts(k: int) -> SpecCounts:
    return {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "accepted_per_pos": [0] * k}


def add_counts(a: SpecCounts, b: SpecCounts) -> SpecCounts:
    return {
        "num_drafts": a["num_drafts"] + b["num_drafts"],
        "num_draft_tokens": a["num_draft_tokens"] + b["num_draft_tokens"],
        "num_accepted_tokens": a["num_accepted_tokens"] + b["num_accepted_tokens"],
        "accepted_per_pos": [x + y for x, y in zip(a["accepted_per_pos"], b["accepted_per_pos"], strict=True)],
    }


def spec_counters(metrics: list[Any]) -> dict[str, Any]:
    """The spec-decode counters of LLM.get_metrics() (engine/counts.py reads every form vLLM gives)."""
    from mtpbench.engine.counts import engine_counters

    return engine_counters(metrics)


def counter_delta(before: dict[str, Any], after: dict[str, Any], k: int) -> SpecCounts:
    """What the cumulative counters grew by between two reads, the first k positions."""
    pb = list(before["accepted_per_pos"]) + [0] * k
    pa = list(after["accepted_per_pos"]) + [0] * k
    return {
        "num_drafts": after["num_drafts"] - before["num_drafts"],
        "num_draft_tokens": after["num_draft_tokens"] - before["num_draft_tokens"],
        "num_accepted_tokens": after["num_accepted_tokens"] - before["num_accepted_tokens"],
        "accepted_per_pos": [pa[i] - pb[i] for i in range(k)],
    }


def per_request_counts(metrics: Any, k: int) -> SpecCounts | None:
    """Counts from vLLM's per-request histogram of accepted drafts per verify step (index j = accepted).
    Acceptance is a prefix, so position i was accepted in every step that accepted more than i."""
    from mtpbench.engine.counts import counts_from_histogram

    hist = getattr(metrics, "histogram", None)
    if not hist:
        return None
    return cast(SpecCounts, counts_from_histogram(hist, k, int(getattr(metrics, "num_draft_tokens", 0))))


def output_counts(output: Any, k: int) -> SpecCounts | None:
    """The per-request counts of a RequestOutput (None: the engine kept none for it)."""
    return per_request_counts(getattr(output.outputs[0], "spec_decode_metrics", None), k)


# --- the prompt loop ----------------------------------------------------------------------------------------


@dataclass
class Answer:
    """What one prompt gave in sequential mode: the RequestOutput its record describes (a conversation: its
    last turn), its per-request counts, and keys that extend or replace the prompt record's (conversations)."""

    output: Any
    per_request: SpecCounts | None
    fields: dict[str, Any] = field(default_factory=dict)


def generate_one(loop: PromptLoop, prompt: dict[str, Any]) -> Answer:
    """A single-turn prompt: its engine input (`input`, when chat.py rendered one) else its text."""
    out = loop.llm.generate([prompt.get("input", prompt["text"])], loop.sp, use_tqdm=False)[0]
    return Answer(out, output_counts(out, loop.k))


class Pooled(TypedDict):
    """What a batched pass adds up: the per-request counts' sum and the prompts that had none."""

    counts: SpecCounts
    without_spec_metrics: list[str]


def _never() -> bool:
    return False


def _ignore(pending: list[str]) -> None:
    return None


def _nothing() -> None:
    return None


def _test_hold() -> tuple[int, Path] | None:
    """MTPBENCH_TEST_HOLD="N:PATH" (see the module docstring), or None when unset."""
    value = os.environ.get(TEST_HOLD_ENV)
    if not value:
        return None
    n, _, path = value.partition(":")
    return int(n), Path(path)


@dataclass
class PromptLoop:
    """Prompts through one engine into prompt records: `sequential` (counts: the cumulative counters'
    difference around each prompt, the per-request counts beside them) or `batched` (counts: each request's
    own per-request counts, its record appended as it finishes). Each record is appended, then announced with
    a `prompt_done` event. The soak workload sets the optional parts: a wall-clock origin, the engine's uptime,
    a deadline, the prompts still pending (for its watchdog) and a hook after each engine step."""

    llm: Any  # vllm.LLM
    sp: Any  # vllm.SamplingParams
    k: int  # speculative tokens per step
    base: dict[str, Any]  # the keys every record starts with (base_record, soak: + round)
    records: str  # records.jsonl
    clock: float | None = None  # wall_s origin; None: each prompt's start (sequential), the batch's (batched)
    uptime_from: float | None = None  # when set, records carry the engine's uptime_s since then (soak)
    event: dict[str, Any] = field(default_factory=dict)  # added to every prompt_done event (soak: round)
    stop: Callable[[], bool] = _never  # asked before each prompt or step: True ends the pass (soak: deadline)
    on_pending: Callable[[list[str]], None] = _ignore  # the prompt ids not yet recorded, as they change
    on_step: Callable[[], None] = _nothing  # after each engine step of a batched pass
    written: int = 0  # prompt records this loop appended
    hold: tuple[int, Path] | None = field(default_factory=_test_hold)

    def sequential(self, prompts: list[dict[str, Any]], answer: Callable[..., Answer] = generate_one) -> None:
        """One prompt at a time; `answer(loop, prompt)` runs it (a conversation runs several turns)."""
        before = spec_counters(self.llm.get_metrics())
        self.on_pending([p["id"] for p in prompts])
        for i, prompt in enumerate(prompts):
            if self.stop():
                break
            t = time.perf_counter()
            got = answer(self, prompt)
            wall = time.perf_counter() - (t if self.clock is None else self.clock)
            after = spec_counters(self.llm.get_metrics())
            delta = counter_delta(before, after, self.k)
            before = after
            self._record(i, prompt, got.output, delta, got.fields, wall, "counters", got.per_request)
            self.on_pending([p["id"] for p in prompts[i + 1 :]])
            self._announce(i, prompt, wall, delta)

    def batched(
        self, prompts: list[dict[str, Any]], request_prefix: str = "mtpbench-", concurrency: int | None = None
    ) -> Pooled:
        """The prompts through the engine's step loop, at most `concurrency` in flight (None: all at once);
        a prompt without per-request counts is recorded with zero drafts (the verdict decides what no
        evidence means) and named in the result."""
        engine = self.llm.llm_engine
        t0 = time.perf_counter() if self.clock is None else self.clock
        index = {f"{request_prefix}{i}": i for i in range(len(prompts))}
        waiting = list(index)
        in_flight: set[str] = set()
        limit = int(concurrency or len(prompts) or 1)

        def admit() -> None:
            while waiting and len(in_flight) < limit:
                rid = waiting.pop(0)
                engine.add_request(rid, prompts[index[rid]].get("input", prompts[index[rid]]["text"]), self.sp)
                in_flight.add(rid)

        admit()
        self.on_pending([p["id"] for p in prompts])
        pooled = zero_counts(self.k)
        missing: list[str] = []
        while engine.has_unfinished_requests():
            if self.stop():
                engine.abort_request(sorted(in_flight))
                break
            for output in engine.step():
                if not getattr(output, "finished", False) or output.request_id not in index:
                    continue
                i = index[output.request_id]
                in_flight.discard(output.request_id)
                admit()
                self.on_pending([prompts[index[x]]["id"] for x in sorted(in_flight, key=index.__getitem__) + waiting])
                counts = output_counts(output, self.k)
                if counts is None:
                    # No histogram: speculation never ran for this request (or the metrics were not read).
                    missing.append(prompts[i]["id"])
                    counts = zero_counts(self.k)
                pooled = add_counts(pooled, counts)
                wall = time.perf_counter() - t0
                self._record(i, prompts[i], output, counts, {}, wall, "per_request", counts)
                self._announce(i, prompts[i], wall, counts)
            self.on_step()
        return {"counts": pooled, "without_spec_metrics": missing}

    def _record(
        self,
        index: int,
        prompt: dict[str, Any],
        output: Any,
        counts: SpecCounts,
        fields: dict[str, Any],
        wall: float,
        source: str,
        per_request: SpecCounts | None,
    ) -> None:
        rec: PromptRecord = {
            **prompt_record(self.base, index, prompt, output),
            **counts,
            **fields,
            "wall_s": round(wall, 4),
            "source": source,
            "per_request": per_request,
        }
        if self.uptime_from is not None:
            rec["uptime_s"] = round(time.perf_counter() - self.uptime_from, 3)
        append_record(self.records, rec)
        self.written += 1

    def _announce(self, index: int, prompt: dict[str, Any], wall: float, counts: SpecCounts) -> None:
        emit("prompt_done", index=index, prompt_id=prompt["id"], wall_s=wall, **self.event, **counts)
        if self.hold is not None and self.written >= self.hold[0]:
            _wait_for(self.hold[1])


def _wait_for(path: Path) -> None:
    """The test hook's hold: poll until the file exists (the test releases it, or stops the run here)."""
    while not path.exists():
        time.sleep(0.05)


def run_prompts(loop: PromptLoop, prompts: list[dict[str, Any]], batched: bool) -> dict[str, Any]:
    """A plain repeat's prompts; returns what its cell_end record adds. Batched, the engine's cumulative
    counters around the whole batch are kept beside whether the per-request counts sum to them exactly."""
    if not batched:
        loop.sequential(prompts)
        return {"prompt_mode": "sequential"}
    before = spec_counters(loop.llm.get_metrics())
    pooled = loop.batched(prompts)
    counters = counter_delta(before, spec_counters(loop.llm.get_metrics()), loop.k)
    return {
        "prompt_mode": "batched",
        "batch_counters": counters,
        "batch_counters_match": counters == pooled["counts"],
        "prompts_without_spec_metrics": pooled["without_spec_metrics"],
    }
