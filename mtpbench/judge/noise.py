"""The noise model a gate is measured under (issue 19 item 4, shared since issue 39): a prompt population's
truth (per prompt a token budget and unconditional per-position acceptance rates) and draws of it in which
drafts are accepted in bursts (a hidden easy/hard regime per prompt, a two-state Markov chain over its drafts),
each prompt running until it has generated its budget. benchmarks/gate_power.py measures the gate's rule
under it through the real judging path; judge/calibrate.py measures upstream projects' rules under it.
Nothing here prints. The model in words: benchmarks/gate_power.py's docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

SHIFT_SIGMA = 0.3  # per-prompt log-scale of the rejection rate under `harmless+shift`


@dataclass(frozen=True)
class Truth:
    name: str
    ids: tuple[str, ...]
    rates: np.ndarray  # (P, K) unconditional per-position acceptance, 0..1, non-increasing in the position
    budget: np.ndarray  # (P,) tokens a prompt generates (drafts + accepted tokens)

    @property
    def expected_drafts(self) -> np.ndarray:
        return self.budget / (1.0 + self.rates.sum(axis=1))

    def pooled(self) -> np.ndarray:
        d = self.expected_drafts
        return (self.rates * d[:, None]).sum(axis=0) / d.sum()

    def describe(self) -> dict[str, Any]:
        d = self.expected_drafts
        return {
            "name": self.name,
            "prompts": len(self.ids),
            "drafts": round(float(d.sum())),
            "drafts_per_prompt": [round(float(d.min())), round(float(d.max()))],
            "pooled_pct": [round(100 * float(x), 2) for x in self.pooled()],
        }


def gemma_truth(n: int, seed: int = 4) -> Truth:
    """A Gemma4-like prompt population: 32-231 drafts a prompt, per-prompt conditional rates from Beta
    distributions (the first n prompts of one fixed draw), the rejections of those n rescaled so that their
    pooled rates are 98/96/90 %."""
    rng = np.random.default_rng(seed)
    total = max(n, 160)
    drafts = np.exp(rng.uniform(math.log(32), math.log(231), total)).round()
    drafts[:2] = [32, 231]
    target = np.array([0.98, 0.96, 0.90])
    cond_mean = target / np.concatenate([[1.0], target[:-1]])
    cond = np.stack([rng.beta(m * 25, (1 - m) * 25, total) for m in cond_mean], axis=1)
    rates, drafts = np.cumprod(cond, axis=1)[:n], drafts[:n]
    for _ in range(50):  # scale each position's rejections until the pooled rates are the target
        pooled = (rates * drafts[:, None]).sum(axis=0) / drafts.sum()
        rates = 1 - (1 - rates) * ((1 - target) / (1 - pooled))
        rates = np.minimum.accumulate(np.clip(rates, 0.0, 1.0), axis=1)
    return Truth("gemma4-like", tuple(f"g{i:03d}" for i in range(n)), rates, drafts * (1 + rates.sum(axis=1)))


def resize(t: Truth, n: int) -> Truth:
    """n prompts of the same population: an evenly spaced subset, or the prompts repeated under new ids."""
    if n <= len(t.ids):
        idx = np.linspace(0, len(t.ids) - 1, n).round().astype(int)
    else:
        idx = np.resize(np.arange(len(t.ids)), n)
    ids = tuple(t.ids[i] if n <= len(t.ids) else f"{t.ids[i]}#{j // len(t.ids)}" for j, i in enumerate(idx))
    return Truth(t.name, ids, t.rates[idx], t.budget[idx])


@dataclass(frozen=True)
class Burst:
    """A hidden easy/hard regime per prompt: a two-state Markov chain over its drafts."""

    name: str
    hard_share: float  # π: stationary share of drafts in the hard regime
    concentration: float  # κ: share of the prompt's rejections that fall in the hard regime (κ = π: none)
    hard_run: float  # L: mean length of a hard run, drafts

    def describe(self) -> str:
        if self.concentration <= self.hard_share:
            return "independent drafts (no regime)"
        return (
            f"hard regime {self.hard_share:.0%} of drafts holding {self.concentration:.0%} of the rejections, "
            f"mean hard run {self.hard_run:g} drafts"
        )


BURSTS = {
    "independent": Burst("independent", 0.2, 0.2, 1.0),
    "mild": Burst("mild", 0.2, 0.6, 4.0),
    "bursty": Burst("bursty", 0.15, 0.85, 8.0),
    "very-bursty": Burst("very-bursty", 0.1, 0.95, 16.0),
}


@dataclass(frozen=True)
class Regimes:
    """Per prompt: conditional acceptance per position in each regime and the chain's switch rates."""

    cond_easy: np.ndarray  # (P, K)
    cond_hard: np.ndarray  # (P, K)
    hard_share: np.ndarray  # (P,)
    p_enter: np.ndarray  # (P,) easy -> hard per draft
    p_leave: float  # hard -> easy per draft


def _conditional(uncond: np.ndarray) -> np.ndarray:
    prev = np.concatenate([np.ones_like(uncond[:, :1]), uncond[:, :-1]], axis=1)
    return np.divide(uncond, prev, out=np.zeros_like(uncond), where=prev > 0)


def regimes(rates: np.ndarray, b: Burst) -> Regimes:
    """Split each prompt's rejections between the regimes so that their mix is the prompt's truth."""
    q = 1.0 - rates
    qmax = q[:, -1]
    pi = np.clip(b.concentration * qmax, b.hard_share, 0.5)  # the hard regime must hold its share
    kappa = np.minimum(b.concentration, np.divide(pi, qmax, out=np.full_like(pi, b.concentration), where=qmax > 0))
    kappa = np.where(b.concentration <= b.hard_share, pi, kappa)
    hard = np.clip(1.0 - q * (kappa / pi)[:, None], 0.0, 1.0)
    easy = np.clip(1.0 - q * ((1.0 - kappa) / (1.0 - pi))[:, None], 0.0, 1.0)
    p_leave = 1.0 / max(b.hard_run, 1.0)
    return Regimes(_conditional(easy), _conditional(hard), pi, pi * p_leave / (1.0 - pi), p_leave)


def simulate(
    t: Truth, cond_scale: np.ndarray, b: Burst, reps: int, rng: np.random.Generator, shift: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """`reps` independent draws of one cell: drafts (reps, P) and accepted per position (reps, P, K).
    cond_scale (K,): the factor on every prompt's conditional rate per position (a drop); `shift`: a
    per-prompt, pooled-neutral change of each draw's rejection rates (harmless+shift)."""
    n_p = len(t.ids)
    k = t.rates.shape[1]
    if shift:
        rates = np.empty((reps, n_p, k))
        d = t.expected_drafts
        for r in range(reps):
            q = (1 - t.rates) * np.exp(rng.normal(0.0, SHIFT_SIGMA, n_p))[:, None]
            want, have = ((1 - t.rates) * d[:, None]).sum(0), (q * d[:, None]).sum(0)
            q = np.minimum(q * np.divide(want, have, out=np.ones(k), where=have > 0), 1.0)
            rates[r] = np.minimum.accumulate(1 - q, axis=1)
        regs = [regimes(rates[r], b) for r in range(reps)]
        ce = np.stack([g.cond_easy for g in regs]) * cond_scale
        ch = np.stack([g.cond_hard for g in regs]) * cond_scale
        pi = np.stack([g.hard_share for g in regs])
        enter = np.stack([g.p_enter for g in regs])
        leave = regs[0].p_leave
    else:
        g = regimes(t.rates, b)
        ce = np.broadcast_to(g.cond_easy * cond_scale, (reps, n_p, k))
        ch = np.broadcast_to(g.cond_hard * cond_scale, (reps, n_p, k))
        pi = np.broadcast_to(g.hard_share, (reps, n_p))
        enter = np.broadcast_to(g.p_enter, (reps, n_p))
        leave = g.p_leave
    budget = np.broadcast_to(t.budget, (reps, n_p))
    hard = rng.random((reps, n_p)) < pi  # the chain starts in its stationary distribution
    tokens = np.zeros((reps, n_p))
    drafts = np.zeros((reps, n_p), dtype=np.int64)
    acc = np.zeros((reps, n_p, k), dtype=np.int64)
    active = tokens < budget
    while active.any():
        c = np.where(hard[..., None], ch, ce)
        ok = np.cumprod(rng.random((reps, n_p, k)) < c, axis=-1) * active[..., None]
        acc += ok
        drafts += active
        tokens += active * (1 + ok.sum(axis=-1))
        u = rng.random((reps, n_p))
        hard = np.where(hard, u >= leave, u < enter)
        active = tokens < budget
    return drafts, acc


def al_scale(t: Truth, pct_: float) -> np.ndarray:
    """The common factor s on every position's conditional rate (position j's unconditional rate times
    s^(j+1)) that lowers the truth's pooled acceptance length by `pct_` % (bisection on the expected AL)."""
    d = t.expected_drafts
    powers = np.arange(1, t.rates.shape[1] + 1)

    def al(s_: float) -> float:
        return 1.0 + float(((t.rates * s_**powers) * d[:, None]).sum() / d.sum())

    want, lo, hi = al(1.0) * (1 - pct_ / 100), 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if al(mid) > want else (mid, hi)
    return np.full(t.rates.shape[1], (lo + hi) / 2)


def drop_scale(t: Truth, pos: int, pts: float) -> np.ndarray:
    """The factor on position `pos`'s conditional rate that lowers its pooled unconditional rate by `pts`."""
    s = np.ones(t.rates.shape[1])
    s[pos] = 1.0 - (pts / 100.0) / float(t.pooled()[pos])
    return s
