"""A context sweep's judgement (issue 31, workload.context): a cell's prompts carry their bucket in their ids
(`<id>@ctx<tokens>`, specs.split_context_id), so a cell's per-prompt evidence splits into one PromptCounts per
bucket, keyed by the set's own prompt ids. `context_table` is the cell's acceptance per bucket (the views'
rows); `context_decay` holds every longer bucket against the first, prompt by prompt, with the gate's paired
rule (diagnoses.divergence's: a fall beyond θ = max(t₁₋α·se, δ − t_power·se), δ = gate.divergence_pts, is a
`context-decay`; a fall beyond δ the data cannot support is `inconclusive`). Only a fall counts: acceptance
that rises with context is no fault of the draft path. Nothing here prints.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from mtpbench.judge.evidence import CellResult
from mtpbench.judge.findings import Cause, Finding, Kind, Severity
from mtpbench.judge.findings.context import ContextBucket, ContextDecay, ContextTable
from mtpbench.judge.stats import Estimate, PromptCounts, gate_threshold, paired_diff
from mtpbench.specs import GateSpec, split_context_id

OnDecay = Literal["fail", "warn"]


def by_bucket(evidence: PromptCounts) -> dict[int, PromptCounts]:
    """The evidence split per context bucket (tokens → the bucket's prompts under their base ids), shortest
    first; empty when the prompts are not a context sweep's (or only one bucket was recorded)."""
    rows: dict[int, list[int]] = {}
    bases: dict[int, list[str]] = {}
    for i, pid in enumerate(evidence.ids):
        split = split_context_id(pid)
        if split is None:
            return {}
        base, tokens = split
        rows.setdefault(tokens, []).append(i)
        bases.setdefault(tokens, []).append(base)
    if len(rows) < 2:
        return {}
    out: dict[int, PromptCounts] = {}
    for tokens in sorted(rows):
        idx = np.asarray(rows[tokens], dtype=np.intp)
        out[tokens] = PromptCounts(
            tuple(bases[tokens]),
            evidence.drafts[idx],
            evidence.draft_tokens[idx],
            evidence.accepted[idx],
            evidence.per_pos[idx],
        )
    return out


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _bucket(tokens: int, pc: PromptCounts) -> ContextBucket:
    total = pc.total()
    drafts = total.num_drafts
    return ContextBucket(
        tokens=tokens,
        prompts=pc.g,
        drafts=drafts,
        per_pos=[_ratio(a, drafts) for a in total.accepted_per_pos],
        mean=_ratio(total.num_accepted_tokens, total.num_draft_tokens),
        acceptance_length=None if not drafts else 1 + total.num_accepted_tokens / drafts,
    )


def context_table(cell: CellResult) -> ContextTable | None:
    """The cell's acceptance per context bucket (None: not a context sweep's cell)."""
    buckets = by_bucket(cell.evidence)
    if not buckets:
        return None
    return ContextTable(cell=cell.cell, buckets=[_bucket(t, pc) for t, pc in buckets.items()])


def context_checks(cell: CellResult) -> int:
    """The checks context_decay makes of the cell (every longer bucket × position): plan.py counts them in
    the run's false-alarm family."""
    buckets = by_bucket(cell.evidence)
    return (len(buckets) - 1) * cell.evidence.k if buckets else 0


def context_decay(cell: CellResult, gate: GateSpec, alpha: float, on_decay: OnDecay = "fail") -> Finding | None:
    """The worst supported fall of any longer bucket at any position against the first bucket (else the
    worst fall beyond δ the data cannot support, as `inconclusive`); None: no fall beyond the rule."""
    buckets = by_bucket(cell.evidence)
    if not buckets:
        return None
    tokens = list(buckets)
    first = buckets[tokens[0]]
    drop = gate.divergence_pts / 100
    worst: tuple[int, int, Estimate, int] | None = None
    unsupported: tuple[int, int, Estimate, int] | None = None
    for t in tokens[1:]:
        a, b = buckets[t].align(first)  # the prompts both buckets measured
        if not a.g:
            continue
        for i in range(a.k):
            est = paired_diff(a.per_pos[:, i], a.drafts, b.per_pos[:, i], b.drafts, gate.confidence)
            if est.value is None or est.value >= 0:
                continue
            theta = None if est.se is None else gate_threshold(est.se, est.df, drop, alpha, gate.power)
            supported = theta is not None and -est.value > theta
            if supported and (worst is None or est.value < (worst[2].value or 0)):
                worst = (t, i, est, a.g)
            elif (
                not supported and -est.value > drop and (unsupported is None or est.value < (unsupported[2].value or 0))
            ):
                unsupported = (t, i, est, a.g)
    chosen = worst or unsupported
    if chosen is None:
        return None
    t, i, est, n = chosen
    table = [_bucket(tt, pc) for tt, pc in buckets.items()]
    at = {b.tokens: b for b in table}
    payload = ContextDecay(
        pos=i,
        tokens=t,
        reference_tokens=tokens[0],
        delta=est.value,
        ci=None if est.ci is None else [est.ci.low, est.ci.high],
        prompts=n,
        run_rate=at[t].per_pos[i],
        reference_rate=at[tokens[0]].per_pos[i],
        tolerance_pts=gate.divergence_pts,
        buckets=table,
    )
    if worst is None:
        return Finding(Kind.INCONCLUSIVE, Severity.FAIL, cell.cell, Cause.TOO_LITTLE_EVIDENCE, payload)
    severity = Severity.FAIL if on_decay == "fail" else Severity.WARN
    return Finding(Kind.CONTEXT_DECAY, severity, cell.cell, Cause.LONG_CONTEXT, payload)
