"""How many prompts a config needs for its gate to certify δ (issue 19): per baseline entry and position,
the smallest drop the gate's rule catches with its power at the run's share of the false-alarm rate
(stats.detectable_drop), and the prompt count at which that drop reaches δ.

The spread a comparison faces is the paired per-prompt difference between the run and the baseline. From a
baseline alone it is not known; the between-prompt spread of the baseline's own per-prompt rates, times
√2 (two independent draws of every prompt), bounds it from above when a prompt's rate is as likely to move
as prompts are to differ: advice from it never says "enough" too early. A pilot run (its paired checks
against the baseline) gives the real paired spread. New prompts are assumed to be like the current ones:
the standard error shrinks as 1/√G. Nothing here prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mtpbench.judge.compare import Comparison
from mtpbench.judge.stats import clustered_ratio, detectable_drop
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import BaselineEntry

MAX_PROMPTS = 1_000_000


@dataclass(frozen=True)
class PositionSize:
    pos: int
    se: float | None  # of the paired difference at the current prompt count
    detectable: float | None  # smallest drop caught with the gate's power, current prompts
    prompts_needed: int | None  # None: no spread to size from (fewer than two prompts)

    @property
    def certifies(self) -> bool:
        return self.prompts_needed is not None and self.detectable is not None


@dataclass(frozen=True)
class Sizing:
    entry: str
    prompts: int
    drafts_per_prompt: float
    checks: int
    alpha: float
    source: str  # "baseline spread x sqrt(2) (upper bound)" | "pilot run (paired)"
    positions: list[PositionSize]

    @property
    def prompts_needed(self) -> int | None:
        need = [p.prompts_needed for p in self.positions]
        return None if any(n is None for n in need) else max(n for n in need if n is not None)


def prompts_for(se: float, g: int, drop: float, alpha: float, power: float) -> int:
    """Smallest prompt count G' whose detectable drop, with se scaled by √(g/G'), is at most `drop`."""
    if se <= 0:
        return max(g, 2)
    lo = 2
    while lo <= MAX_PROMPTS:
        if (detectable_drop(se * math.sqrt(g / lo), lo - 1, alpha, power) or math.inf) <= drop:
            return lo
        lo = lo + max(1, lo // 8)
    return MAX_PROMPTS


def size_from_ses(entry: str, prompts: int, drafts_per_prompt: float, ses: list[float | None], gate: GateSpec,
                  checks: int, source: str) -> Sizing:
    alpha = gate.false_alarm / max(checks, 1)
    drop = gate.tolerance_pts / 100
    out = []
    for i, se in enumerate(ses):
        if se is None or prompts < 2:
            out.append(PositionSize(i, se, None, None))
            continue
        out.append(PositionSize(i, se, detectable_drop(se, prompts - 1, alpha, gate.power),
                                prompts_for(se, prompts, drop, alpha, gate.power)))
    return Sizing(entry, prompts, drafts_per_prompt, checks, alpha, source, out)


def size_entry(entry: BaselineEntry, gate: GateSpec, checks: int) -> Sizing | None:
    """From the entry's per-prompt counts; None for an entry without them (rates only: nothing to size from)."""
    if not entry.prompts:
        return None
    ids = list(entry.prompts)
    drafts = np.array([entry.prompts[p].num_drafts for p in ids], dtype=float)
    per_pos = np.array([entry.prompts[p].accepted_per_pos for p in ids], dtype=float).reshape(len(ids), -1)
    ses = []
    for i in range(per_pos.shape[1]):
        se = clustered_ratio(per_pos[:, i], drafts).se
        ses.append(None if se is None else math.sqrt(2) * se)
    return size_from_ses(f"{entry.build}/{entry.mode}", len(ids), float(drafts.mean()) if len(ids) else 0.0, ses,
                         gate, checks, "baseline spread x sqrt(2), an upper bound")


def size_pilot(comp: Comparison) -> list[Sizing]:
    """From a pilot run's checks against the baseline: the paired spread the gate really faces, per cell."""
    out = []
    for cell in dict.fromkeys(x.cell for x in comp.checks):
        xs = sorted((x for x in comp.checks if x.cell == cell), key=lambda x: x.pos)
        if not xs or any(x.method != "paired" for x in xs):
            continue
        c = next(c for c in comp.cells if c.cell == cell)
        g = c.evidence.g
        drafts = float(c.evidence.drafts.mean()) if g else 0.0
        out.append(size_from_ses(cell, xs[0].prompts, drafts, [x.se for x in xs], comp.gate, comp.family,
                                 "pilot run against the baseline, paired"))
    return out


def family_of_config(k: int, cells: list[tuple[str, str, str]], reference_mode: str | None) -> int:
    """The checks a run of these (build, mode, variant) cells makes: k per cell against the baseline, and k
    per graph/compiled cell against its eager reference (compare.analyze's family)."""
    distinct = list(dict.fromkeys(cells))
    refs = {(b, v) for b, m, v in distinct if m == reference_mode}
    pairs = sum(1 for b, m, v in distinct if m != reference_mode and (b, v) in refs)
    return k * (len(distinct) + pairs)
