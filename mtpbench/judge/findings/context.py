"""The context sweep's payloads (judge/signals/context.py fills them): acceptance per context bucket of a cell
(`ContextBucket`, what compare/show and the report's table and plot read) and a bucket whose acceptance fell
below the first bucket's, paired by prompt (`ContextDecay`, the `context-decay` finding). Beside findings/__init__.py,
whose Kind enum names the finding."""

from __future__ import annotations

from dataclasses import dataclass

from mtpbench.judge.findings import Payload


@dataclass(frozen=True, kw_only=True)
class ContextBucket(Payload):
    """One cell's acceptance over one bucket's prompts: `tokens` of shared context before each prompt; rates
    are fractions (None: no drafts)."""

    tokens: int
    prompts: int
    drafts: int
    per_pos: list[float | None]
    mean: float | None  # accepted / draft tokens
    acceptance_length: float | None  # 1 + accepted / drafts


@dataclass(frozen=True, kw_only=True)
class ContextTable(Payload):
    """A context sweep cell's buckets, shortest context first (the one the others are held against)."""

    cell: str
    buckets: list[ContextBucket]


@dataclass(frozen=True, kw_only=True)
class ContextDecay(Payload):
    """A bucket's acceptance at `pos` against the first bucket's, on the prompts both measured (greedy: the
    paired rule graph divergence uses, θ = max(t₁₋α·se, δ − t_power·se), δ = gate.divergence_pts); `delta` is
    the bucket's rate minus the first's (negative: a fall). `buckets` is the whole trend, for the reader."""

    check: str = "context-decay"
    pos: int
    tokens: int
    reference_tokens: int
    delta: float | None
    ci: list[float] | None
    prompts: int
    run_rate: float | None
    reference_rate: float | None
    tolerance_pts: float
    buckets: list[ContextBucket]
