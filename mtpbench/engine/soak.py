"""The soak workload inside the worker: one engine kept alive for many rounds, to see drift within a process.

Fresh-process repeats see what varies from process to process; they are blind to acceptance that decays
while one server runs (vllm-ascend#10495: MTP acceptance falls to 0 after several rounds of benchmarks in one
server, with prefix caching on, and generation then stalls). Here the worker's engine is reused for
`rounds` rounds; round r sends the set order[r % len(order)] (A: the config's prompts; A-shuffled: the same
in an order seeded by r; B: the workload's other prompts, ids recorded as `B:<id>`), each prompt behind the
workload's `repeated_prefix` (so that requests share cached prefix blocks). Every prompt record carries its
`round` and the engine's uptime; after each round a `round_end` record holds the round's wall time, the
highest KV-cache usage seen, the prefix-cache queries / hits and preemptions during the round (where vLLM's
metrics have them; null where not). Records are appended as they are produced, like every workload's.

A round past `round_timeout_s` is a stall, recorded as such (`round_end` with `stalled: true` and the
prompts still unfinished): the step loop aborts them at its next step, and a watchdog thread writes the
record itself when a step never returns, so that a hung engine still leaves its stall on disk before the
runner's deadline kills the cell. The engine is then suspect: no later round is sent.

Standard library only at module level (the build's interpreter), and of mtpbench the engine's records module,
whose prompt loop runs each round.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from mtpbench.engine.records import PromptLoop, append_record, emit
from mtpbench.schema import RoundEndRecord

KV_USAGE = "vllm:kv_cache_usage_perc"  # a fraction, despite its name (vllm/v1/metrics/loggers.py)
ROUND_COUNTERS = {
    "prefix_cache_queries": "vllm:prefix_cache_queries",
    "prefix_cache_hits": "vllm:prefix_cache_hits",
    "num_preemptions": "vllm:num_preemptions",
}
KV_SAMPLE_S = 0.25  # reading every metric of the engine each step would cost more than a tiny step


def round_prompts(job: dict[str, Any], r: int) -> tuple[str, list[dict[str, Any]]]:
    """The set round r sends and its prompts (ids and texts as sent)."""
    wl = job["workload"]
    order = wl.get("order") or ["A"]
    name = order[r % len(order)]
    if name == "B":
        prompts = [{"id": f"B:{p['id']}", "text": p["text"]} for p in job.get("soak_other_prompts", [])]
    else:
        prompts = [dict(p) for p in job["prompts"]]
        if name == "A-shuffled":
            random.Random(r).shuffle(prompts)
    prefix = wl.get("repeated_prefix") or ""
    return name, [{"id": p["id"], "text": prefix + p["text"]} for p in prompts]


def metric_values(metrics: list[Any]) -> dict[str, float]:
    """Counters and gauges by name, summed over label sets (engines)."""
    out: dict[str, float] = {}
    for m in metrics:
        v = getattr(m, "value", None)
        if isinstance(v, int | float):
            out[m.name] = out.get(m.name, 0.0) + float(v)
    return out


class _Round:
    """One round's clock, stall flag and the round_end record, written once (by the loop or the watchdog)."""

    def __init__(self, r: int, deadline_s: float, write: Any) -> None:
        self.r, self.deadline_s, self.write = r, deadline_s, write
        self.t0 = time.perf_counter()
        self.lock = threading.Lock()
        self.written = False
        self.unfinished: list[str] = []
        self.timer = threading.Timer(deadline_s + 5.0, self._watchdog)
        self.timer.daemon = True
        self.timer.start()

    def late(self) -> bool:
        return time.perf_counter() - self.t0 > self.deadline_s

    def _watchdog(self) -> None:
        # A step that never returns: leave the stall on disk before the runner's deadline kills the cell.
        self.end({"stalled": True, "watchdog": True, "unfinished": list(self.unfinished)})

    def end(self, fields: dict[str, Any]) -> bool:
        with self.lock:
            if self.written:
                return False
            self.written = True
        self.timer.cancel()
        self.write(
            {
                "round": self.r,
                "wall_s": round(time.perf_counter() - self.t0, 4),
                "deadline_s": self.deadline_s,
                **fields,
            }
        )
        return True


class _KvPeak:
    """The highest KV-cache usage sampled after engine steps, at most every KV_SAMPLE_S (None: not exposed)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.peak: float | None = None
        self.sampled = 0.0

    def sample(self) -> None:
        now = time.perf_counter()
        if now - self.sampled >= KV_SAMPLE_S:
            self.sampled = now
            self.add(metric_values(self.llm.get_metrics()).get(KV_USAGE))

    def add(self, usage: float | None) -> None:
        if usage is not None:
            self.peak = usage if self.peak is None else max(self.peak, usage)


def _pending(rnd: _Round) -> Callable[[list[str]], None]:
    def set_unfinished(ids: list[str]) -> None:
        rnd.unfinished = ids

    return set_unfinished


def _run_round(
    llm: Any,
    sp: Any,
    prompts: list[dict[str, Any]],
    k: int,
    base: dict[str, Any],
    records: str,
    rnd: _Round,
    t_ready: float,
    batched: bool,
    concurrency: int | None,
) -> float | None:
    """The round's prompts through the prompt loop, on the round's clock and deadline, each record carrying
    the engine's uptime; returns the highest KV-cache usage seen (batched: sampled after steps, sequential:
    read after the round; None: not exposed)."""
    kv = _KvPeak(llm)
    loop = PromptLoop(
        llm,
        sp,
        k,
        base,
        records,
        clock=rnd.t0,
        uptime_from=t_ready,
        event={"round": rnd.r},
        stop=rnd.late,
        on_pending=_pending(rnd),
        on_step=kv.sample,
    )
    if batched:
        loop.batched(prompts, request_prefix=f"mtpbench-soak{rnd.r}-", concurrency=concurrency)
    else:
        loop.sequential(prompts)
        kv.add(metric_values(llm.get_metrics()).get(KV_USAGE))
    return kv.peak


def run_soak(
    llm: Any, sp: Any, job: dict[str, Any], k: int, base: dict[str, Any], records: str, batched: bool
) -> dict[str, Any]:
    """Every round of the job through `llm`; returns what the cell_end record adds."""
    wl = job["workload"]
    rounds, deadline = int(wl["rounds"]), float(wl.get("round_timeout_s") or 600.0)
    t_ready = time.perf_counter()
    done = 0
    stalled_at: int | None = None
    for r in range(rounds):
        name, prompts = round_prompts(job, r)
        before = metric_values(llm.get_metrics())
        rb = {**base, "round": r}

        def write(fields: dict[str, Any], rb: dict[str, Any] = rb) -> None:
            record: RoundEndRecord = {**rb, "type": "round_end", **fields}
            append_record(records, record)

        rnd = _Round(r, deadline, write)
        started = round(time.perf_counter() - t_ready, 3)
        kv = _run_round(llm, sp, prompts, k, rb, records, rnd, t_ready, batched, wl.get("concurrency"))
        after = metric_values(llm.get_metrics())
        late = rnd.late()
        fields = {
            "set": name,
            "prompts": len(prompts),
            "stalled": late,
            "unfinished": rnd.unfinished if late else [],
            "uptime_start_s": started,
            "uptime_s": round(time.perf_counter() - t_ready, 3),
            "kv_cache_usage_max": kv,
            **{key: (int(after[m] - before.get(m, 0.0)) if m in after else None) for key, m in ROUND_COUNTERS.items()},
        }
        rnd.end(fields)
        emit("round_done", round=r, set=name, stalled=late, wall_s=time.perf_counter() - rnd.t0)
        done = r + 1
        if late:
            stalled_at = r  # the engine is suspect: later rounds would measure a stuck engine
            break
    return {"prompt_mode": "batched" if batched else "sequential", "rounds_done": done, "stalled_round": stalled_at}
