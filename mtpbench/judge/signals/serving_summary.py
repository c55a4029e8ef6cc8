"""The serving workload's own figures and checks (pure); mtpbench/render/serving.py renders them.

A serving run's requests are stored as `prompt` records (raw spec-decode counts, one cluster per
request), so the acceptance table, the per-position verdicts and the diagnoses are the offline ones.
What only serving has lives here: per cell, requests ok/total, req/s, output tok/s, TTFT / TPOT / ITL /
E2E percentiles, the `/metrics`-vs-per-request count check, and two acceptance definitions side by side:

- **pooled** (vLLM's `/metrics` and `vllm bench serve`): accepted / drafts over all requests, per position
  and in total; AL = 1 + accepted / drafts;
- **per-request mean** (tools that average the responses' `mean_acceptance_length`): the mean over
  requests of 1 + accepted_r / drafts_r.

Per-position intervals are clustered by request (ratio estimator, linearised variance): the drafts of one
request are correlated, the requests are the independent units. Checks (typed findings, worded by render/words/):
failed or missing requests fail the gate; a `/metrics` delta that differs from the per-request sum is
shown; req/s below a baseline entry's by more than the workload's tolerance is reported (failing only
with `fail_on_throughput_drop`).

A counters-only cell (a build without per-request counts, mtpbench/engine/serving.py) has `request` records
(latencies, tokens) and, per cell-repeat, one pooled `prompt` record of the `/metrics` deltas: its
acceptance columns are that pooled count, with no interval and no per-request mean (there are no
per-request counts to cluster or average), and the table names the method.

`select_baseline` keeps the entries of the run's workload: a serving run is never compared with an
offline entry, nor with one of another concurrency or max_tokens (exit 4).
Computing never prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mtpbench.errors import NotComparableError
from mtpbench.judge.evidence import CellResult, Evidence, collect_evidence
from mtpbench.judge.findings import (
    Cause,
    CountMismatch,
    FailedRequests,
    Finding,
    Kind,
    Severity,
    ThroughputDrop,
)
from mtpbench.judge.signals.concurrency import level_cells, sweep_levels
from mtpbench.judge.stats import Interval
from mtpbench.schema import COUNTERS_ONLY, CellStatus
from mtpbench.store.baseline import Baseline, BaselineEntry
from mtpbench.store.results import Run

PER_REQUEST = "per-request"
COUNTERS_ONLY_METHOD = "counters-only: pooled over the load, no per-request clustering"
# The workload fields a baseline entry must share with the run for acceptance to be comparable.
MUST_MATCH = ("concurrency", "max_tokens", "request_rate")


def workload_of(run: Run) -> dict[str, Any]:
    return dict(run.typed.config.workload or {"kind": "offline"})


def is_serving(run: Run) -> bool:
    return workload_of(run).get("kind") == "serving"


@dataclass(frozen=True)
class Percentiles:
    p50: float | None
    p99: float | None


@dataclass
class ServingCell:
    cell: str
    build: str
    mode: str
    variant: str
    requests_total: int
    requests_ok: int
    requests_failed: int
    load_wall_s: float
    req_per_s: float | None
    output_tok_per_s: float | None
    ttft_s: Percentiles
    tpot_s: Percentiles
    itl_s: Percentiles
    e2e_s: Percentiles
    # Pooled over all requests (vLLM's /metrics definition), fractions.
    pooled_per_pos: list[float | None]
    pooled_per_pos_ci: list[Interval | None]
    # Conditional rate per position (accepted at i / accepted at i-1; vllm#39359), beside the unconditional.
    pooled_conditional: list[float | None]
    pooled_mean: float | None
    pooled_al: float | None
    # Mean over requests of each request's acceptance length 1 + accepted/drafts.
    mean_request_al: float | None
    metrics_delta: list[dict[str, Any] | None] = field(default_factory=list)
    per_request_sum: list[dict[str, Any]] = field(default_factory=list)
    counts_match: list[bool | None] = field(default_factory=list)
    server_died: bool = False
    errors: list[str] = field(default_factory=list)
    # Where the acceptance columns come from: per-request counts, or the /metrics deltas (counters-only).
    acceptance: str = PER_REQUEST
    acceptance_reasons: list[str] = field(default_factory=list)
    # A concurrency sweep (workload.concurrency a list): one row per level, in the order they ran; empty else.
    levels: list[LevelRow] = field(default_factory=list)


@dataclass
class LevelRow:
    """One concurrency level of a sweep in one cell: its load and its acceptance (the evidence the judge holds
    against the first level's, judge/signals/concurrency.py)."""

    concurrency: int
    requests_total: int
    requests_ok: int
    req_per_s: float | None
    output_tok_per_s: float | None
    ttft_s: Percentiles
    tpot_s: Percentiles
    pooled_per_pos: list[float | None]
    pooled_mean: float | None
    pooled_al: float | None
    counts_match: list[bool | None] = field(default_factory=list)


def _pcts(values: list[float]) -> Percentiles:
    if not values:
        return Percentiles(None, None)
    arr = np.asarray(values, dtype=float)
    return Percentiles(float(np.percentile(arr, 50)), float(np.percentile(arr, 99)))


def summarize_serving(run: Run, confidence: float = 0.95, evidence: Evidence | None = None) -> list[ServingCell]:
    """Per cell: requests, throughput, latencies and both acceptance definitions. `evidence`: the run's, when
    the caller has it (every command does), so the records are not collected again."""
    wl = workload_of(run)
    k = run.typed.k
    order: list[str] = []
    meta: dict[str, dict[str, str]] = {}
    for c in run.typed.cells:
        if c.cell not in meta:
            order.append(c.cell)
            meta[c.cell] = {"build": c.build, "mode": c.mode, "variant": c.variant}
    # Acceptance from the evidence stage (complete repeats, the same clustered interval as the offline table):
    # the serving table, the checks and `baseline save` cannot disagree on what a cell accepted.
    evidence = collect_evidence(run, confidence) if evidence is None else evidence
    judged = {c.cell: c for c in evidence.cells}
    out: list[ServingCell] = []
    for cell in order:
        mine = [r for r in run.records if r.get("cell") == cell]
        # Requests: per-request prompt records, or (counters-only) request records without counts.
        reqs = [
            r
            for r in mine
            if (r.get("type") == "prompt" and r.get("source") != "metrics_delta") or r.get("type") == "request"
        ]
        starts = evidence.meta_of(cell)
        ev = judged[cell]
        pooled = any(r.get("type") == "prompt" and r.get("source") == "metrics_delta" for r in mine)
        # Fail closed: a cell with any counters-only repeat is shown (and judged) pooled, without intervals.
        counters_only = ev.counters_only or pooled
        failed = [r for r in mine if r.get("type") == "request_failed"]
        loads = [r for r in mine if r.get("type") == "load"]
        repeats = {c.repeat for c in run.typed.cells if c.cell == cell}
        # a sweep sends num_requests at each level
        total = int(wl.get("num_requests", 0)) * len(repeats) * max(len(sweep_levels(run)), 1)
        wall = sum(float(x.get("wall_s") or 0.0) for x in loads)
        gen = sum(int(r.get("num_generated_tokens") or 0) for r in reqs)
        s_ = ev.summary
        per_pos = [s_.per_pos[i] if i < len(s_.per_pos) else None for i in range(k)]
        # One pooled count per cell-repeat is not a sample of requests: no interval.
        per_pos_ci = [None if counters_only or i >= len(s_.per_pos_ci) else s_.per_pos_ci[i] for i in range(k)]
        obs = ev.observations
        drafts = obs["num_drafts"].to_numpy(dtype=np.float64)
        acc = obs["num_accepted_tokens"].to_numpy(dtype=np.float64)
        als = [] if counters_only else (1 + acc[drafts > 0] / drafts[drafts > 0]).tolist()
        out.append(
            ServingCell(
                cell=cell,
                **meta[cell],
                requests_total=total,
                requests_ok=len(reqs),
                requests_failed=len(failed),
                load_wall_s=wall,
                req_per_s=len(reqs) / wall if wall > 0 and loads else None,
                output_tok_per_s=gen / wall if wall > 0 and loads else None,
                ttft_s=_pcts([float(r["ttft_s"]) for r in reqs if r.get("ttft_s") is not None]),
                tpot_s=_pcts([float(r["tpot_s"]) for r in reqs if r.get("tpot_s") is not None]),
                itl_s=_pcts([float(x) for r in reqs for x in r.get("itl_s") or []]),
                e2e_s=_pcts([float(r["e2e_s"]) for r in reqs if r.get("e2e_s") is not None]),
                pooled_per_pos=per_pos,
                pooled_per_pos_ci=per_pos_ci,
                pooled_conditional=[s_.conditional[i] if i < len(s_.conditional) else None for i in range(k)],
                pooled_mean=s_.mean,
                pooled_al=s_.acceptance_length,
                mean_request_al=sum(als) / len(als) if als else None,
                metrics_delta=[x.get("metrics_delta") for x in loads],
                per_request_sum=[x.get("per_request_sum") for x in loads],
                counts_match=[x.get("counts_match") for x in loads],
                server_died=any(x.get("server_died") for x in loads),
                errors=[str(r.get("error")) for r in failed][:5],
                acceptance=COUNTERS_ONLY if counters_only else PER_REQUEST,
                acceptance_reasons=sorted(
                    {str(m.per_request_reason) for m in starts if m.counters_only and m.per_request_reason}
                ),
                levels=_level_rows(run, ev, reqs, loads, len(repeats), confidence),
            )
        )
    return out


def _level_rows(
    run: Run,
    cell: CellResult,
    reqs: list[dict[str, Any]],
    loads: list[dict[str, Any]],
    repeats: int,
    confidence: float,
) -> list[LevelRow]:
    """A sweep's rows for one cell: each level's requests and load records, its acceptance from the level's
    evidence (concurrency.level_cells: complete repeats only, as the cell's own row)."""
    by_level = level_cells(run, cell, confidence)
    k = run.typed.k
    n = int(workload_of(run).get("num_requests", 0))
    rows: list[LevelRow] = []
    for level, lc in by_level.items():
        mine = [r for r in reqs if r.get("concurrency") == level]
        level_loads = [x for x in loads if x.get("concurrency") == level]
        wall = sum(float(x.get("wall_s") or 0.0) for x in level_loads)
        gen = sum(int(r.get("num_generated_tokens") or 0) for r in mine)
        s_ = lc.summary
        rows.append(
            LevelRow(
                concurrency=level,
                requests_total=n * repeats,
                requests_ok=len(mine),
                req_per_s=len(mine) / wall if wall > 0 else None,
                output_tok_per_s=gen / wall if wall > 0 else None,
                ttft_s=_pcts([float(r["ttft_s"]) for r in mine if r.get("ttft_s") is not None]),
                tpot_s=_pcts([float(r["tpot_s"]) for r in mine if r.get("tpot_s") is not None]),
                pooled_per_pos=[s_.per_pos[i] if i < len(s_.per_pos) else None for i in range(k)],
                pooled_mean=s_.mean,
                pooled_al=s_.acceptance_length,
                counts_match=[x.get("counts_match") for x in level_loads],
            )
        )
    return rows


# --- baselines ------------------------------------------------------------------------------------------


def select_baseline(run: Run, baseline: Baseline) -> tuple[Baseline, list[str]]:
    """The baseline restricted to the run's workload, and the serving fields it could not check.
    Raises NotComparableError (exit 4) when no entry is of the run's workload or a serving entry was
    measured under another concurrency / max_tokens / request rate."""
    wl = workload_of(run)
    serving = wl.get("kind") == "serving"
    keep = [e for e in baseline.entries if (e.serving is not None) == serving]
    if not keep:
        have = "offline" if serving else "serving"
        raise NotComparableError(
            f"run {run.run_id} is a {wl.get('kind')} run and baseline {baseline.name} has only {have} entries: "
            "acceptance under a server's batching is not comparable with the offline probe"
        )
    unchecked: list[str] = []
    if serving:
        mismatches: list[str] = []
        for e in keep:
            assert e.serving is not None
            for key in MUST_MATCH:
                want = getattr(e.serving, key)
                have_v = wl.get(key) if key != "max_tokens" else (wl.get("max_tokens") or _max_tokens(run))
                if want is None:
                    if key != "request_rate":  # unlimited is the default on both sides
                        unchecked.append(f"workload.{key}")
                elif have_v is None or _level_list(have_v) != _level_list(want):
                    mismatches.append(f"workload.{key}={have_v} vs baseline {want} ({e.build}/{e.mode})")
            unchecked += [f"serving.{f}" for f in e.serving.not_checked]
        if mismatches:
            raise NotComparableError(
                f"run {run.run_id} is not comparable with baseline {baseline.name}: " + "; ".join(mismatches)
            )
    return baseline.model_copy(update={"entries": keep}), sorted(set(unchecked))


def _level_list(value: Any) -> list[float]:
    """A workload value as a list of numbers: a concurrency sweep's levels, or one value (the same run
    measured under another sweep, or a sweep against a single level, is not comparable)."""
    return [float(v) for v in value] if isinstance(value, list) else [float(value)]


def _max_tokens(run: Run) -> int | None:
    return run.typed.config.sampling.max_tokens


def baseline_fields(
    run: Run, build: str, mode: str, variant: str | None, served: list[ServingCell]
) -> dict[str, Any] | None:
    """What `baseline save` stores for a serving cell (None for an offline run); `served`: the run's
    summarize_serving."""
    if not is_serving(run):
        return None
    wl = workload_of(run)
    cell = next((c for c in served if (c.build, c.mode) == (build, mode) and variant in (None, c.variant)), None)
    if cell is None:
        return None
    ms = 1000.0
    return {
        "concurrency": wl.get("concurrency"),
        "num_requests": wl.get("num_requests"),
        "max_tokens": wl.get("max_tokens") or _max_tokens(run),
        "request_rate": wl.get("request_rate"),
        "requests_ok": cell.requests_ok,
        "requests_total": cell.requests_total,
        "req_per_s": _round(cell.req_per_s, 3),
        "output_tok_per_s": _round(cell.output_tok_per_s, 1),
        "ttft_p50_ms": _round(cell.ttft_s.p50 and cell.ttft_s.p50 * ms, 1),
        "tpot_p50_ms": _round(cell.tpot_s.p50 and cell.tpot_s.p50 * ms, 2),
        "mean_request_al": _round(cell.mean_request_al, 4),
    }


def _round(x: float | None, n: int) -> float | None:
    return None if x is None else round(float(x), n)


# --- checks -----------------------------------------------------------------------------------------------


def diagnoses(run: Run, served: list[ServingCell] | None) -> list[Finding]:
    """Serving findings that need no baseline (failed requests, /metrics vs per-request counts); `served`:
    the run's summarize_serving (None: not a serving run)."""
    if served is None:
        return []
    out: list[Finding] = []
    incomplete = {c.cell for c in run.typed.cells if c.status != CellStatus.OK}
    for c in served:
        missing = c.requests_total - c.requests_ok - c.requests_failed
        # A cell-repeat that did not finish (server died, timeout, no start) is a failed run (exit 3, the
        # run-failed warning), not a gate finding; its recorded requests are still shown in the table.
        if c.cell not in incomplete and (c.requests_failed or missing > 0):
            out.append(
                Finding(
                    Kind.FAILED_REQUESTS,
                    Severity.FAIL,
                    c.cell,
                    Cause.REQUESTS_FAILED,
                    FailedRequests(
                        ok=c.requests_ok,
                        total=c.requests_total,
                        failed=c.requests_failed,
                        not_finished=max(missing, 0),
                        server_died=c.server_died,
                        first_error=c.errors[0] if c.errors else None,
                    ),
                )
            )
        for rep, (match, delta, summed) in enumerate(
            zip(c.counts_match, c.metrics_delta, c.per_request_sum, strict=True)
        ):
            if match is False:
                out.append(
                    Finding(
                        Kind.COUNT_MISMATCH,
                        Severity.WARN,
                        c.cell,
                        Cause.COUNTERS_DISAGREE,
                        CountMismatch(repeat=rep, metrics_delta=delta, per_request_sum=summed),
                    )
                )
    return out


def throughput_diagnoses(
    run: Run, entries: dict[str, BaselineEntry], served: list[ServingCell] | None
) -> list[Finding]:
    """req/s below the baseline entry's by more than the workload's tolerance (same NUM only); `served` as in
    `diagnoses`."""
    if served is None:
        return []
    wl = workload_of(run)
    out: list[Finding] = []
    for c in served:
        entry = entries.get(c.cell)  # the entry compare judged the cell's acceptance by (resolve_entry)
        if entry is None or entry.serving is None or entry.serving.req_per_s is None or c.req_per_s is None:
            continue
        if entry.serving.num_requests is not None and entry.serving.num_requests != wl.get("num_requests"):
            continue  # listed by throughput_unchecked
        drop = 1 - c.req_per_s / entry.serving.req_per_s
        tol = float(wl.get("throughput_tolerance_pct", 20.0))
        if drop * 100 > tol:
            sev = Severity.FAIL if wl.get("fail_on_throughput_drop") else Severity.WARN
            out.append(
                Finding(
                    Kind.THROUGHPUT_DROP,
                    sev,
                    c.cell,
                    Cause.SLOWER_SERVING,
                    ThroughputDrop(
                        req_per_s=c.req_per_s,
                        baseline_req_per_s=entry.serving.req_per_s,
                        drop=drop,
                        tolerance_pct=tol,
                    ),
                )
            )
    return out


def throughput_unchecked(run: Run, baseline: Baseline) -> list[str]:
    wl = workload_of(run)
    out = []
    for e in baseline.entries:
        if e.serving is None:
            continue
        if e.serving.req_per_s is None:
            out.append("serving.req_per_s")
        elif e.serving.num_requests is not None and e.serving.num_requests != wl.get("num_requests"):
            out.append(f"serving.req_per_s (baseline NUM={e.serving.num_requests}, run NUM={wl.get('num_requests')})")
    return sorted(set(out))
