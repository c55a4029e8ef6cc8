"""The reference's finding payloads (judge/signals/reference_comparison.py fills them): the engine below the acceptance
its weights give, the engine and the reference disagreeing beyond numerics, other text than the target's greedy text.
Beside findings/__init__.py, whose Kind enum names them. Rates are fractions, AL in tokens per draft step."""

from __future__ import annotations

from dataclasses import dataclass, field

from mtpbench.judge.findings import OMIT_NONE, Payload


@dataclass(frozen=True)
class Unbalanced:
    """A prompt whose counters do not add up with the tokens it generated: a correct engine has
    0 ≤ accepted + drafts + 1 − generated ≤ k (each step yields accepted + 1 tokens, the prefill one, and only
    the last step may run past the stop)."""

    prompt_id: str
    repeat: int
    generated: int
    num_drafts: int
    num_accepted_tokens: int


@dataclass(frozen=True, kw_only=True)
class ReferenceBelow(Payload):
    """A cell whose engine accepts significantly less than the reference at some positions (or in AL), pooled
    over its complete repeats; `hash_seeds` are the repeats that fall below on their own."""

    positions: list[int]  # per-position checks below (0-based)
    engine_rates: list[float | None]  # at those positions
    reference_rates: list[float | None]
    deltas: list[float | None]
    uppers: list[float | None]  # one-sided (1 − α) upper bounds on the deltas
    al: bool  # acceptance length below too
    engine_al: float | None
    reference_al: float | None
    hash_seeds: list[int | None]
    prompts: list[str]  # every prompt that accepted fewer drafts per step than the weights say
    observations: int
    exact: int  # observations (with the reference's text) whose counts equal the reference's
    tolerance_pts: float
    tolerance_al_pct: float
    alpha: float


@dataclass(frozen=True, kw_only=True)
class ReferenceDisagreement(Payload):
    """The engine above the reference beyond δ, or counters that do not add up with the text."""

    positions: list[int]  # per-position checks significantly above (0-based)
    engine_rates: list[float | None]
    reference_rates: list[float | None]
    al: bool
    prompts: list[str]  # prompts accepting more than the weights say, then the unbalanced ones
    unbalanced: list[Unbalanced] = field(default_factory=list)
    tolerance_pts: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True, kw_only=True)
class ReferenceTextDiffers(Payload):
    """Observations whose engine text (output sha256) is not the target's greedy text as regenerated."""

    prompts: list[str]
    observations: int  # (repeat, prompt) observations with other text
    of: int
