"""How many prompts a config needs for its gate to certify δ (issue 19): per baseline entry, for the gate's
primary endpoint (acceptance length, or each position) and for the per-position diagnoses, the smallest drop
the gate's rule catches with its power at the run's share of the false-alarm rate (stats.detectable_drop),
and the prompt count at which the run certifies δ: that drop at most δ and, for the primary endpoint, a
harmless run certifying δ (its lower bound above −δ) but for a false_alarm share of the time
(stats.certifiable_drop), since an inconclusive harmless run fails the gate too (exit 5).

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
from mtpbench.judge.plan import AlphaSplit, split_alpha
from mtpbench.judge.stats import certifiable_drop, clustered_ratio, detectable_drop
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import BaselineEntry

MAX_PROMPTS = 1_000_000
AL = -1  # the `pos` of the acceptance-length row


@dataclass(frozen=True)
class PositionSize:
    pos: int  # AL (-1): acceptance length, in tokens per draft step; otherwise a position, as a fraction
    se: float | None  # of the paired difference at the current prompt count
    detectable: float | None  # smallest drop caught with the gate's power, current prompts
    prompts_needed: int | None  # None: no spread to size from (fewer than two prompts)
    drop: float = 0.0  # δ in the row's unit
    primary: bool = False  # the gate's primary endpoint: also sized so that a harmless run certifies δ

    @property
    def certifies(self) -> bool:
        return self.prompts_needed is not None and self.detectable is not None


@dataclass(frozen=True)
class Sizing:
    entry: str
    prompts: int
    drafts_per_prompt: float
    checks: int
    split: AlphaSplit  # the run's false-alarm rate per primary check and per diagnosis (plan.split_alpha)
    source: str  # "baseline spread x sqrt(2) (upper bound)" | "pilot run (paired)"
    positions: list[PositionSize]  # the AL row first, then the positions

    @property
    def prompts_needed(self) -> int | None:
        """What the gate's primary endpoint needs (a pass certifies it)."""
        need = [p.prompts_needed for p in self.positions if p.primary]
        return None if not need or any(n is None for n in need) else max(n for n in need if n is not None)


def prompts_for(
    se: float, g: int, drop: float, alpha: float, power: float, cert: tuple[float, float] | None = None
) -> int:
    """Smallest prompt count G' whose detectable drop, with se scaled by √(g/G'), is at most `drop`; with
    `cert` = (the certificate's one-sided share, the harmless-failure share), also whose certifiable drop is."""
    if se <= 0:
        return max(g, 2)
    lo = 2
    while lo <= MAX_PROMPTS:
        s = se * math.sqrt(g / lo)
        ok = (detectable_drop(s, lo - 1, alpha, power) or math.inf) <= drop
        if ok and cert is not None:
            ok = (certifiable_drop(s, lo - 1, *cert) or math.inf) <= drop
        if ok:
            return lo
        lo = lo + max(1, lo // 8)
    return MAX_PROMPTS


def primary_count(gate: GateSpec, cells: int, k: int) -> int:
    return cells * (1 if gate.primary == "acceptance_length" else k)


def size_from_ses(
    entry: str,
    prompts: int,
    drafts_per_prompt: float,
    al: tuple[float | None, float],
    ses: list[float | None],
    gate: GateSpec,
    checks: int,
    primary: int,
    source: str,
) -> Sizing:
    """`al` = (se of the AL difference, the baseline's AL); `ses` per position; `checks` the run's family,
    `primary` the checks a pass certifies (compare.Comparison.family / .primary)."""
    split = split_alpha(gate.false_alarm, primary, checks - primary)
    cert = ((1 - gate.confidence) / max(primary, 1), split.primary)
    rows = [(AL, al[0], gate.tolerance_al_pct / 100 * al[1], gate.primary == "acceptance_length")]
    rows += [(i, se, gate.tolerance_pts / 100, gate.primary == "positions") for i, se in enumerate(ses)]
    out = []
    for pos, se, drop, is_primary in rows:
        if se is None or prompts < 2:
            out.append(PositionSize(pos, se, None, None, drop, is_primary))
            continue
        alpha = split.primary if is_primary else split.diagnosis
        need = prompts_for(se, prompts, drop, alpha, gate.power, cert if is_primary else None)
        out.append(PositionSize(pos, se, detectable_drop(se, prompts - 1, alpha, gate.power), need, drop, is_primary))
    return Sizing(entry, prompts, drafts_per_prompt, checks, split, source, out)


def size_entry(entry: BaselineEntry, gate: GateSpec, checks: int, primary: int = 2) -> Sizing | None:
    """From the entry's per-prompt counts; None for an entry without them (rates only: nothing to size from)."""
    if not entry.prompts:
        return None
    ids = list(entry.prompts)
    drafts = np.array([entry.prompts[p].num_drafts for p in ids], dtype=float)
    per_pos = np.array([entry.prompts[p].accepted_per_pos for p in ids], dtype=float).reshape(len(ids), -1)

    def se2(num: np.ndarray) -> float | None:
        se = clustered_ratio(num, drafts).se
        return None if se is None else math.sqrt(2) * se

    al = clustered_ratio(per_pos.sum(axis=1), drafts).value
    return size_from_ses(
        f"{entry.build}/{entry.mode}",
        len(ids),
        float(drafts.mean()) if len(ids) else 0.0,
        (se2(per_pos.sum(axis=1)), 1.0 + (al or 0.0)),
        [se2(per_pos[:, i]) for i in range(per_pos.shape[1])],
        gate,
        checks,
        primary,
        "baseline spread x sqrt(2), an upper bound",
    )


def size_pilot(comp: Comparison) -> list[Sizing]:
    """From a pilot run's checks against the baseline: the paired spread the gate really faces, per cell."""
    out = []
    lengths = {x.cell: x for x in comp.lengths}
    for cell in dict.fromkeys(x.cell for x in comp.checks):
        xs = sorted((x for x in comp.checks if x.cell == cell), key=lambda x: x.pos)
        length = lengths.get(cell)
        if not xs or any(x.method != "paired" for x in xs) or length is None or length.base_al is None:
            continue
        c = next(c for c in comp.cells if c.cell == cell)
        g = c.evidence.g
        drafts = float(c.evidence.drafts.mean()) if g else 0.0
        out.append(
            size_from_ses(
                cell,
                xs[0].prompts,
                drafts,
                (length.se, length.base_al),
                [x.se for x in xs],
                comp.gate,
                comp.family,
                comp.primary,
                "pilot run against the baseline, paired",
            )
        )
    return out


def family_of_config(k: int, cells: list[tuple[str, str, str]], reference_mode: str | None) -> int:
    """The checks a run of these (build, mode, variant) cells makes: its AL and k positions per cell against
    the baseline, and k per graph/compiled cell against its eager reference (compare.analyze's family)."""
    distinct = list(dict.fromkeys(cells))
    refs = {(b, v) for b, m, v in distinct if m == reference_mode}
    pairs = sum(1 for b, m, v in distinct if m != reference_mode and (b, v) in refs)
    return (k + 1) * len(distinct) + k * pairs
