"""Pure statistics: raw speculative-decoding counts → rates, acceptance length and intervals.

Semantics are vLLM's (see DESIGN.md): per-position acceptance (unconditional) = accepted_per_pos[i] /
num_drafts; conditional rate = accepted_per_pos[i] / accepted_per_pos[i-1]; mean acceptance =
num_accepted_tokens / num_draft_tokens; avg accepted = num_accepted_tokens / num_drafts; AL = 1 + that.

Intervals are Wilson score intervals (scipy's `binomtest(...).proportion_ci`) treating each draft as a
Bernoulli trial at each position. Drafts within a prompt are correlated, so these are optimistic; the
gate's tolerance (absolute points) is what keeps noise from failing a build, the interval only guards
against calling a drop on too few drafts. Differences use Newcombe's hybrid score interval; against a
rates-only baseline (no counts) the baseline is taken as exact. Heterogeneity across repeats is a
chi-square test of homogeneity. Nothing here prints or reads files.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from scipy import stats as sps


@dataclass(frozen=True)
class Counts:
    """Raw counts of one or more prompts; the only thing records keep, rates are derived."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: tuple[int, ...] = ()

    def __add__(self, other: Counts) -> Counts:
        k = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        a = list(self.accepted_per_pos) + [0] * (k - len(self.accepted_per_pos))
        b = list(other.accepted_per_pos) + [0] * (k - len(other.accepted_per_pos))
        return Counts(
            self.num_drafts + other.num_drafts,
            self.num_draft_tokens + other.num_draft_tokens,
            self.num_accepted_tokens + other.num_accepted_tokens,
            tuple(x + y for x, y in zip(a, b, strict=True)),
        )

    @property
    def k(self) -> int:
        return len(self.accepted_per_pos)

    @classmethod
    def total(cls, items: Iterable[Counts]) -> Counts:
        out = cls()
        for c in items:
            out = out + c
        return out


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


@dataclass(frozen=True)
class Summary:
    """Derived figures for a pool of counts; rates are fractions (0..1), None where undefined."""

    counts: Counts
    per_pos: tuple[float | None, ...]
    per_pos_ci: tuple[Interval | None, ...]
    conditional: tuple[float | None, ...]
    mean: float | None
    mean_ci: Interval | None
    avg_accepted: float | None
    acceptance_length: float | None
    # Across repeats (one pool per repeat): per position (min, max) of the per-repeat rates.
    repeat_rates: tuple[tuple[float | None, ...], ...] = field(default=())

    @property
    def spread(self) -> tuple[float | None, ...]:
        if len(self.repeat_rates) < 2:
            return tuple(None for _ in self.per_pos)
        out: list[float | None] = []
        for i in range(len(self.per_pos)):
            vals = [r[i] for r in self.repeat_rates if r[i] is not None]
            out.append(max(vals) - min(vals) if len(vals) >= 2 else None)
        return tuple(out)


def ratio(num: int, den: int) -> float | None:
    return num / den if den > 0 else None


def wilson(successes: int, trials: int, confidence: float = 0.95) -> Interval | None:
    if trials <= 0:
        return None
    successes = max(0, min(successes, trials))
    ci = sps.binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="wilson")
    return Interval(float(ci.low), float(ci.high))


def summarize(counts: Counts, confidence: float = 0.95, repeats: Sequence[Counts] = ()) -> Summary:
    d = counts.num_drafts
    per_pos = tuple(ratio(a, d) for a in counts.accepted_per_pos)
    conditional: list[float | None] = []
    for i, a in enumerate(counts.accepted_per_pos):
        prev = d if i == 0 else counts.accepted_per_pos[i - 1]
        conditional.append(ratio(a, prev))
    avg = ratio(counts.num_accepted_tokens, d)
    return Summary(
        counts=counts,
        per_pos=per_pos,
        per_pos_ci=tuple(wilson(a, d, confidence) for a in counts.accepted_per_pos),
        conditional=tuple(conditional),
        mean=ratio(counts.num_accepted_tokens, counts.num_draft_tokens),
        mean_ci=wilson(counts.num_accepted_tokens, counts.num_draft_tokens, confidence),
        avg_accepted=avg,
        acceptance_length=None if avg is None else 1.0 + avg,
        repeat_rates=tuple(tuple(ratio(a, r.num_drafts) for a in r.accepted_per_pos) for r in repeats),
    )


def diff_interval(
    a_succ: int, a_n: int, b_succ: int | None, b_n: int | None, b_rate: float, confidence: float = 0.95
) -> Interval | None:
    """Interval on rate_a − rate_b. With b's counts: Newcombe's hybrid score method (no. 10, 1998).
    Without them (published, rates-only baseline): b is exact and the interval is a's Wilson interval − b."""
    wa = wilson(a_succ, a_n, confidence)
    if wa is None:
        return None
    pa = a_succ / a_n
    if b_succ is None or not b_n:
        return Interval(wa.low - b_rate, wa.high - b_rate)
    wb = wilson(b_succ, b_n, confidence)
    assert wb is not None
    pb = b_succ / b_n
    d = pa - pb
    low = d - math.sqrt((pa - wa.low) ** 2 + (wb.high - pb) ** 2)
    high = d + math.sqrt((wa.high - pa) ** 2 + (pb - wb.low) ** 2)
    return Interval(low, high)


def homogeneity_pvalue(successes: Sequence[int], trials: Sequence[int]) -> float | None:
    """Chi-square test that several repeats share one acceptance rate (None when it cannot be tested)."""
    rows = [(s, n - s) for s, n in zip(successes, trials, strict=True) if n > 0]
    if len(rows) < 2:
        return None
    col_acc = sum(r[0] for r in rows)
    col_rej = sum(r[1] for r in rows)
    if col_acc == 0 or col_rej == 0:
        return 1.0  # every repeat accepted everything (or nothing): identical by construction
    return float(sps.chi2_contingency(rows, correction=False).pvalue)
