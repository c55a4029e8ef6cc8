"""Pure statistics: raw speculative-decoding counts → rates, acceptance length, intervals, tests and power.

Semantics are vLLM's (see docs/verdicts.md): per-position acceptance (unconditional) = accepted_per_pos[i] /
num_drafts; conditional rate = accepted_per_pos[i] / accepted_per_pos[i-1]; mean acceptance =
num_accepted_tokens / num_draft_tokens; avg accepted = num_accepted_tokens / num_drafts; AL = 1 + that.

**The prompt is the unit of evidence.** Drafts within one prompt share a context and a trajectory, so
they are strongly correlated (an easy prompt accepts nearly everything, a hard one much less); treating
every draft as an independent Bernoulli trial made a 95 % interval exclude zero for about half of all
harmless changes in a review simulation. So every rate is a *ratio estimator over prompt clusters*
(sum of accepted / sum of drafts, prompts weighted by their drafts, as vLLM pools them) and its standard
error is the cluster-robust (linearisation, CR1) one, with Student's t on G−1 degrees of freedom, G the
number of prompts:

    r = ΣA_g / ΣD_g,   se² = G/(G−1) · Σ_g (A_g − r·D_g)² / (ΣD_g)²,   CI = r ± t(G−1) · se

Why this and not a bootstrap: it is closed-form (vectorised over 10⁶ records in milliseconds), exact for
the case that matters most — with equal drafts per prompt it *is* the one-sample t interval on the
per-prompt rates (tested against scipy) — and a bootstrap over 5-40 prompts is itself unreliable (it
cannot see beyond the G values it resamples, and its intervals are too narrow for small G), while t on
G−1 degrees of freedom widens honestly when prompts are few. A run compared with a baseline that kept its
per-prompt counts uses the *prompt-paired* version of the same estimator on the prompts both sides have
(with equal drafts it is the paired t interval). Identical repeats of a prompt (greedy: same counts,
same output) are one observation, not several; the caller collapses them before anything here is called.

Against a baseline that kept only pooled counts (older saves) the difference interval is MOVER (Zou &
Donner 2008): the run's clustered interval combined with the baseline's Wilson interval; with two Wilson
intervals MOVER is exactly Newcombe's hybrid score interval (1998, method 10), tested on his worked
example. Against a published, rates-only baseline the baseline is taken as exact.

The smallest detectable drop (MDE) of a check is (t_{1−α} + t_{power})·se, α its share of the run's
false-alarm rate, se the spread the comparison faces (the paired one against per-prompt counts).

Cross-process instability of a sampled (non-deterministic) run is a prompt-level permutation test: within
each prompt, which process produced which observation is exchangeable under "the process does not
matter". Nothing here prints or reads files.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# scipy.special, not scipy.stats: the same quantile functions (scipy.stats.t.ppf calls stdtrit), without
# the second of import time scipy.stats costs every `compare` (tested against scipy.stats).
from scipy.special import ndtri, stdtrit


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
class PromptCounts:
    """Per-prompt cluster totals (one row per prompt, identical repeats already collapsed): the evidence."""

    ids: tuple[str, ...]
    drafts: np.ndarray  # (G,)
    draft_tokens: np.ndarray  # (G,)
    accepted: np.ndarray  # (G,) num_accepted_tokens
    per_pos: np.ndarray  # (G, k)

    @property
    def g(self) -> int:
        return len(self.ids)

    @property
    def k(self) -> int:
        return int(self.per_pos.shape[1]) if self.per_pos.ndim == 2 else 0

    def total(self) -> Counts:
        return Counts(
            int(self.drafts.sum()),
            int(self.draft_tokens.sum()),
            int(self.accepted.sum()),
            tuple(int(x) for x in self.per_pos.sum(axis=0)) if self.g else (0,) * self.k,
        )

    def take(self, ids: Sequence[str]) -> PromptCounts:
        return self._rows(np.asarray(_index(self.ids).get_indexer(list(ids)), dtype=np.intp), tuple(ids))

    def _rows(self, idx: np.ndarray, ids: tuple[str, ...]) -> PromptCounts:
        if (idx < 0).any():
            raise KeyError(ids[int(np.flatnonzero(idx < 0)[0])])
        return PromptCounts(ids, self.drafts[idx], self.draft_tokens[idx], self.accepted[idx], self.per_pos[idx])

    def align(self, other: PromptCounts) -> tuple[PromptCounts, PromptCounts]:
        """Both sides restricted to the prompts both measured, row for row, in self's order (one vectorised
        lookup: at 10⁵ prompts a dict per position was most of a comparison's time)."""
        where = _index(other.ids).get_indexer(list(self.ids))
        mine = np.flatnonzero(where >= 0)
        ids = tuple(self.ids[i] for i in mine) if len(mine) < len(self.ids) else self.ids
        return self._rows(mine, ids), other._rows(where[mine], ids)

    @classmethod
    def empty(cls, k: int) -> PromptCounts:
        z = np.zeros(0, dtype=np.int64)
        return cls((), z, z, z, np.zeros((0, k), dtype=np.int64))


def _index(ids: tuple[str, ...]) -> pd.Index:
    return pd.Index(ids, dtype=object)


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


@dataclass(frozen=True)
class Estimate:
    """A rate or a difference with its prompt-clustered standard error; df None = normal / exact."""

    value: float | None
    se: float | None = None
    df: float | None = None
    ci: Interval | None = None


def t_quantile(q: float, df: float | None) -> float:
    """The q quantile of Student's t with `df` degrees of freedom (the normal's without), scipy.special only."""
    return float(ndtri(q) if df is None or math.isinf(df) else stdtrit(df, q))


def clustered_ratio(num: np.ndarray, den: np.ndarray, confidence: float = 0.95) -> Estimate:
    """ΣA/ΣD over prompt clusters with the cluster-robust (CR1) standard error and a t(G−1) interval."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    keep = den > 0
    num, den = num[keep], den[keep]
    total = den.sum()
    if total <= 0:
        return Estimate(None)
    r = float(num.sum() / total)
    g = int(num.size)
    if g < 2:
        return Estimate(r)
    resid = (num - r * den) / total
    se = math.sqrt(g / (g - 1) * float(np.sum(resid * resid)))
    half = t_quantile(1 - (1 - confidence) / 2, g - 1) * se
    return Estimate(r, se, g - 1, Interval(r - half, r + half))


def paired_diff(
    num_a: np.ndarray, den_a: np.ndarray, num_b: np.ndarray, den_b: np.ndarray, confidence: float = 0.95
) -> Estimate:
    """rate_a − rate_b on the same prompts (rows aligned): linearised difference of two ratio estimators,
    cluster-robust over the prompts, t on G−1 degrees of freedom."""
    num_a, den_a = np.asarray(num_a, dtype=float), np.asarray(den_a, dtype=float)
    num_b, den_b = np.asarray(num_b, dtype=float), np.asarray(den_b, dtype=float)
    keep = (den_a > 0) | (den_b > 0)
    num_a, den_a, num_b, den_b = num_a[keep], den_a[keep], num_b[keep], den_b[keep]
    ta, tb = den_a.sum(), den_b.sum()
    if ta <= 0 or tb <= 0:
        return Estimate(None)
    ra, rb = num_a.sum() / ta, num_b.sum() / tb
    d = float(ra - rb)
    g = int(num_a.size)
    if g < 2:
        return Estimate(d)
    resid = (num_a - ra * den_a) / ta - (num_b - rb * den_b) / tb
    se = math.sqrt(g / (g - 1) * float(np.sum(resid * resid)))
    half = t_quantile(1 - (1 - confidence) / 2, g - 1) * se
    return Estimate(d, se, g - 1, Interval(d - half, d + half))


def wilson(successes: int, trials: int, confidence: float = 0.95) -> Interval | None:
    if trials <= 0:
        return None
    x, n = max(0, min(successes, trials)), float(trials)
    # Wilson's score interval (Wilson 1927; Newcombe 1998 method 3), what scipy.stats.binomtest's
    # proportion_ci(method="wilson") returns; clipped to [0, 1] as it is.
    z = float(ndtri(0.5 + confidence / 2))
    z2 = z * z
    centre = (x + z2 / 2) / (n + z2)
    half = z / (n + z2) * math.sqrt(x * (n - x) / n + z2 / 4)
    return Interval(max(0.0, centre - half), min(1.0, centre + half))


def mover_diff(pa: float, ci_a: Interval, pb: float, ci_b: Interval) -> Interval:
    """Interval on pa − pb from one interval per side (MOVER, Zou & Donner 2008). With Wilson intervals on
    both sides this is Newcombe's hybrid score interval (1998, method 10)."""
    d = pa - pb
    low = d - math.sqrt((pa - ci_a.low) ** 2 + (ci_b.high - pb) ** 2)
    high = d + math.sqrt((ci_a.high - pa) ** 2 + (pb - ci_b.low) ** 2)
    return Interval(low, high)


def newcombe_diff(a_succ: int, a_n: int, b_succ: int, b_n: int, confidence: float = 0.95) -> Interval | None:
    wa, wb = wilson(a_succ, a_n, confidence), wilson(b_succ, b_n, confidence)
    if wa is None or wb is None:
        return None
    return mover_diff(a_succ / a_n, wa, b_succ / b_n, wb)


def diff_interval(
    a_succ: int, a_n: int, b_succ: int | None, b_n: int | None, b_rate: float, confidence: float = 0.95
) -> Interval | None:
    """Draft-level interval on rate_a − rate_b (history.py's change points between runs): Newcombe's hybrid
    score interval with b's counts; without them b is exact and it is a's Wilson interval − b. The gate
    itself uses the prompt-clustered intervals above."""
    wa = wilson(a_succ, a_n, confidence)
    if wa is None:
        return None
    if b_succ is None or not b_n:
        return Interval(wa.low - b_rate, wa.high - b_rate)
    return newcombe_diff(a_succ, a_n, b_succ, b_n, confidence)


def binomial_se(successes: int, trials: int) -> float | None:
    if trials <= 0:
        return None
    p = successes / trials
    return math.sqrt(p * (1 - p) / trials)


def welch_df(se_a: float, df_a: float | None, se_b: float, df_b: float | None) -> float | None:
    """Welch–Satterthwaite degrees of freedom of a sum of two independent variance estimates."""
    va, vb = se_a**2, se_b**2
    terms = [(v, d) for v, d in ((va, df_a), (vb, df_b)) if v > 0]
    if not terms:
        return df_a
    if any(d is None for _, d in terms):
        finite = [d for _, d in terms if d is not None]
        return min(finite) if finite else None
    den = sum(v * v / d for v, d in terms if d)  # type: ignore[operator]
    return (va + vb) ** 2 / den if den > 0 else df_a


def gate_threshold(se: float, df: float | None, drop: float, alpha: float, power: float) -> float:
    """How far below the baseline an estimate must fall to be called a regression: significant at `alpha`
    (one-sided, t_{1−α}·se) and no smaller than drop − t_{power}·se, so that a true drop of `drop` is caught
    with probability `power` while a drop well under it is not (the rule of checks.position_check). A
    threshold of `drop` itself would catch a drop of exactly `drop` half the time."""
    return max(t_quantile(1 - alpha, df) * se, drop - t_quantile(power, df) * se)


def two_sided(delta: float, se: float, df: float | None, confidence: float) -> Interval:
    """The t (or normal, df None) interval delta ± t_{(1+c)/2}·se."""
    h = t_quantile(0.5 + confidence / 2, df) * se
    return Interval(delta - h, delta + h)


def lower_bound(delta: float, se: float, df: float | None, alpha: float) -> float:
    """One-sided (1 − α) lower confidence bound on a difference."""
    return delta - t_quantile(1 - alpha, df) * se


def detectable_drop(se: float | None, df: float | None, alpha: float, power: float) -> float | None:
    """The smallest true drop the gate's rule calls a regression with probability `power` at one-sided
    `alpha`: (t_{1−α} + t_{power})·se. At or below the gate's drop δ, a pass certifies that δ is excluded
    and a δ drop fails with the target power; above it, the run cannot certify δ (sizing says how many
    prompts it needs). None without a standard error."""
    if se is None or (df is not None and df < 1):
        return None
    return (t_quantile(1 - alpha, df) + t_quantile(power, df)) * se


def certifiable_drop(se: float | None, df: float | None, cert_alpha: float, harmless_alpha: float) -> float | None:
    """The smallest δ a harmless run (a true Δ of 0) certifies with probability 1 − harmless_alpha: its lower
    bound Δ − t_{1−cert}·se is above −δ unless Δ falls below −t_{1−harmless}·se. Sizing holds the primary
    endpoint to it, so that a harmless run is inconclusive (exit 5) at most that often. None without se."""
    if se is None or (df is not None and df < 1):
        return None
    return (t_quantile(1 - cert_alpha, df) + t_quantile(1 - harmless_alpha, df)) * se


def permutation_spread_pvalue(
    accepted: np.ndarray, drafts: np.ndarray, n_perm: int = 4000, seed: int = 0
) -> tuple[float, float] | None:
    """Do R processes differ beyond prompt-level noise? accepted, drafts: (G, R), every prompt measured in
    every process. Statistic: the spread (max − min) of the per-process pooled rates. Under "the process
    does not matter" the R observations of a prompt are exchangeable, so labels are permuted within each
    prompt. Returns (observed spread, p-value), p = (1 + #{perm ≥ obs}) / (1 + n_perm); fixed seed, so the
    verdict is reproducible."""
    acc, d = np.asarray(accepted, dtype=float), np.asarray(drafts, dtype=float)
    if acc.ndim != 2 or acc.shape[1] < 2 or acc.shape[0] < 1 or np.any(d.sum(axis=0) <= 0):
        return None

    def spread(a: np.ndarray, n: np.ndarray) -> np.ndarray:
        rates = a.sum(axis=-2) / n.sum(axis=-2)
        return rates.max(axis=-1) - rates.min(axis=-1)

    obs = float(spread(acc, d))
    rng = np.random.default_rng(seed)
    cells = acc.size
    # Bounded work and memory over 10^5 prompts: fewer permutations (never under 200), drawn in chunks.
    n_perm = int(min(n_perm, max(200, 20_000_000 // cells)))
    chunk = max(1, 2_000_000 // cells)
    hits = 0
    for start in range(0, n_perm, chunk):
        m = min(chunk, n_perm - start)
        idx = np.argsort(rng.random((m, *acc.shape)), axis=2)
        pa = np.take_along_axis(np.broadcast_to(acc, idx.shape), idx, axis=2)
        pd_ = np.take_along_axis(np.broadcast_to(d, idx.shape), idx, axis=2)
        hits += int(np.sum(spread(pa, pd_) >= obs - 1e-12))
    return obs, float((1 + hits) / (1 + n_perm))


@dataclass(frozen=True)
class Summary:
    """Derived figures for a cell's evidence; rates are fractions (0..1), None where undefined.
    Intervals are prompt-clustered (see the module docstring)."""

    counts: Counts
    prompts: int
    per_pos: tuple[float | None, ...]
    per_pos_ci: tuple[Interval | None, ...]
    per_pos_se: tuple[float | None, ...]
    conditional: tuple[float | None, ...]
    mean: float | None
    mean_ci: Interval | None
    avg_accepted: float | None
    acceptance_length: float | None  # pooled: 1 + Σ accepted / Σ drafts (vLLM's acceptance-length test)
    request_al: float | None = None  # mean over prompts of 1 + accepted / drafts, no drafts = 1 (_request_al)
    # Across complete repeats (one pool per repeat): per position the per-repeat rates.
    repeat_rates: tuple[tuple[float | None, ...], ...] = field(default=())

    @property
    def spread(self) -> tuple[float | None, ...]:
        if len(self.repeat_rates) < 2:
            return tuple(None for _ in self.per_pos)
        out: list[float | None] = []
        for i in range(len(self.per_pos)):
            vals = [r[i] for r in self.repeat_rates if i < len(r) and r[i] is not None]
            out.append(max(vals) - min(vals) if len(vals) >= 2 else None)
        return tuple(out)


def ratio(num: int, den: int) -> float | None:
    return num / den if den > 0 else None


def _clip(ci: Interval | None) -> Interval | None:
    return None if ci is None else Interval(max(0.0, ci.low), min(1.0, ci.high))


def _request_al(evidence: PromptCounts) -> float | None:
    """Per-request mean AL, as vLLM's Gemma-4 acceptance-rate tests and `vllm bench serve` average it."""
    d = evidence.drafts.astype(float)
    per = 1.0 + np.divide(evidence.accepted, d, out=np.zeros_like(d), where=d > 0)
    return float(per.mean()) if evidence.g else None


def summarize(evidence: PromptCounts, confidence: float = 0.95, repeats: Sequence[Counts] = ()) -> Summary:
    counts = evidence.total()
    d = counts.num_drafts
    ests = [clustered_ratio(evidence.per_pos[:, i], evidence.drafts, confidence) for i in range(evidence.k)]
    conditional: list[float | None] = []
    for i, a in enumerate(counts.accepted_per_pos):
        prev = d if i == 0 else counts.accepted_per_pos[i - 1]
        conditional.append(ratio(a, prev))
    mean = clustered_ratio(evidence.accepted, evidence.draft_tokens, confidence)
    avg = ratio(counts.num_accepted_tokens, d)
    return Summary(
        counts=counts,
        prompts=int(np.count_nonzero(evidence.drafts > 0)),
        per_pos=tuple(e.value for e in ests),
        per_pos_ci=tuple(_clip(e.ci) for e in ests),
        per_pos_se=tuple(e.se for e in ests),
        conditional=tuple(conditional),
        mean=mean.value,
        mean_ci=_clip(mean.ci),
        avg_accepted=avg,
        acceptance_length=None if avg is None else 1.0 + avg,
        request_al=_request_al(evidence),
        repeat_rates=tuple(tuple(ratio(a, r.num_drafts) for a in r.accepted_per_pos) for r in repeats),
    )
