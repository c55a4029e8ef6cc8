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

Standard library only at module level (the build's interpreter); the worker hands over its helpers.
"""

from __future__ import annotations

import random
import threading
import time
from types import ModuleType
from typing import Any

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


def _metric_values(metrics: list[Any]) -> dict[str, float]:
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


def _batched_round(
    w: ModuleType,
    llm: Any,
    sp: Any,
    prompts: list[dict[str, Any]],
    k: int,
    base: dict[str, Any],
    records: str,
    rnd: _Round,
    t_ready: float,
    conc: int | None = None,
) -> float | None:
    """The round's prompts through the engine's step loop, at most `conc` in flight (None: all at once);
    returns the highest KV-cache usage sampled (None: not exposed)."""
    engine = llm.llm_engine
    index = {f"mtpbench-soak{rnd.r}-{i}": i for i in range(len(prompts))}
    waiting = list(index)
    open_ids: set[str] = set()
    limit = int(conc or len(prompts) or 1)  # the workload's concurrency: requests in flight at once

    def admit() -> None:
        while waiting and len(open_ids) < limit:
            rid = waiting.pop(0)
            engine.add_request(rid, prompts[index[rid]]["text"], sp)
            open_ids.add(rid)

    admit()
    rnd.unfinished = [p["id"] for p in prompts]
    kv: float | None = None
    sampled = 0.0
    while engine.has_unfinished_requests():
        if rnd.late():
            engine.abort_request(sorted(open_ids))
            break
        for output in engine.step():
            if not getattr(output, "finished", False) or output.request_id not in index:
                continue
            i = index[output.request_id]
            open_ids.discard(output.request_id)
            admit()
            rnd.unfinished = [prompts[index[x]]["id"] for x in sorted(open_ids, key=index.get) + waiting]
            counts = w.per_request_counts(getattr(output.outputs[0], "spec_decode_metrics", None), k) or {
                "num_drafts": 0,
                "num_draft_tokens": 0,
                "num_accepted_tokens": 0,
                "accepted_per_pos": [0] * k,
            }
            wall = time.perf_counter() - rnd.t0
            rec = {
                **w.prompt_record(base, i, prompts[i], output),
                **counts,
                "wall_s": round(wall, 4),
                "source": "per_request",
                "per_request": counts,
                "uptime_s": round(time.perf_counter() - t_ready, 3),
            }
            w.append_record(records, rec)
            w.emit("prompt_done", index=i, prompt_id=prompts[i]["id"], wall_s=wall, round=rnd.r, **counts)
        now = time.perf_counter()
        if now - sampled >= KV_SAMPLE_S:
            sampled = now
            usage = _metric_values(llm.get_metrics()).get(KV_USAGE)
            if usage is not None:
                kv = usage if kv is None else max(kv, usage)
    return kv


def _sequential_round(
    w: ModuleType,
    llm: Any,
    sp: Any,
    prompts: list[dict[str, Any]],
    k: int,
    base: dict[str, Any],
    records: str,
    rnd: _Round,
    t_ready: float,
) -> float | None:
    """One prompt at a time; counts are the counters' differences around each prompt."""
    before = w.spec_counters(llm.get_metrics())
    rnd.unfinished = [p["id"] for p in prompts]
    for i, prompt in enumerate(prompts):
        if rnd.late():
            break
        out = llm.generate([prompt["text"]], sp, use_tqdm=False)
        after = w.spec_counters(llm.get_metrics())
        delta = w.counter_delta(before, after, k)
        before = after
        wall = time.perf_counter() - rnd.t0
        rec = {
            **w.prompt_record(base, i, prompt, out[0]),
            **delta,
            "wall_s": round(wall, 4),
            "source": "counters",
            "per_request": w.per_request_counts(getattr(out[0].outputs[0], "spec_decode_metrics", None), k),
            "uptime_s": round(time.perf_counter() - t_ready, 3),
        }
        w.append_record(records, rec)
        rnd.unfinished = [p["id"] for p in prompts[i + 1 :]]
        w.emit("prompt_done", index=i, prompt_id=prompt["id"], wall_s=wall, round=rnd.r, **delta)
    return _metric_values(llm.get_metrics()).get(KV_USAGE)


def run_soak(
    w: ModuleType, llm: Any, sp: Any, job: dict[str, Any], k: int, base: dict[str, Any], records: str, batched: bool
) -> dict[str, Any]:
    """Every round of the job through `llm`; returns what the cell_end record adds. `w` is the worker module
    (its record and count helpers), handed over so that this module imports nothing of mtpbench."""
    wl = job["workload"]
    rounds, deadline = int(wl["rounds"]), float(wl.get("round_timeout_s") or 600.0)
    t_ready = time.perf_counter()
    done = 0
    stalled_at: int | None = None
    for r in range(rounds):
        name, prompts = round_prompts(job, r)
        before = _metric_values(llm.get_metrics())
        rb = {**base, "round": r}

        def write(fields: dict[str, Any], rb: dict[str, Any] = rb) -> None:
            w.append_record(records, {**rb, "type": "round_end", **fields})

        rnd = _Round(r, deadline, write)
        started = round(time.perf_counter() - t_ready, 3)
        if batched:
            kv = _batched_round(w, llm, sp, prompts, k, rb, records, rnd, t_ready, wl.get("concurrency"))
        else:
            kv = _sequential_round(w, llm, sp, prompts, k, rb, records, rnd, t_ready)
        after = _metric_values(llm.get_metrics())
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
        w.emit("round_done", round=r, set=name, stalled=late, wall_s=time.perf_counter() - rnd.t0)
        done = r + 1
        if late:
            stalled_at = r  # the engine is suspect: later rounds would measure a stuck engine
            break
    return {"prompt_mode": "batched" if batched else "sequential", "rounds_done": done, "stalled_round": stalled_at}
