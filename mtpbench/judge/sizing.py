"""How many prompts a config needs for its gate to certify δ (issues 19 and 30): per baseline entry, for the
gate's primary endpoint (acceptance length, or each position), for the per-position diagnoses and for graph
divergence, the prompt count at which every check that can fail a harmless run holds its share of the
false-alarm rate (plan.split_alpha), and a δ drop is caught with the gate's power:

- the primary endpoint: the smallest drop the rule catches (stats.detectable_drop) at most δ, and a harmless
  run certifying δ (its lower bound above −δ) but for the primary part's share of the time
  (stats.certifiable_drop): an inconclusive harmless run fails the gate too (exit 5);
- graph divergence (a config with a graph mode beside its eager reference): a harmless graph cell's gap to
  eager stays within gate.divergence_pts at each position but for the diagnoses' share over those checks
  (a gap beyond it is exit 1 or 5 whether or not it is significant);
- the position diagnoses fail a harmless run only as a false regression, which their α holds already: their
  rows say how far they reach (the prompts at which each alone has the gate's power), not what is needed.

The spread a comparison faces is the paired per-prompt difference between the run and the baseline (or, for
a baseline without per-prompt counts, the run's own spread about the baseline's fixed rates). Where it comes
from, said with the answer (`Sizing.source`):
- a pilot run (`size --run`): its checks' standard errors against the baseline, paired or not;
- a baseline with per-prompt counts: the between-prompt spread of its per-prompt rates times √2 (two
  independent draws of every prompt);
- a baseline with rates or pooled counts only: a stated prior, the per-prompt counts of the shipped set of the
  same pair class (PRIORS), times √2.
Each is floored by `bursty_se`: the spread two draws of the same prompts show when drafts are accepted in runs
(the `bursty` level of benchmarks/gate_power.py: a hard regime on 15 % of the drafts holding 85 % of the
rejections, mean run 8 drafts), computed from the per-prompt counts at hand; a greedy pilot that repeated
itself bit for bit (zero spread) is sized by that floor, not called enough at any count. New prompts are
assumed to be like the current ones: the standard error shrinks as 1/√G. Nothing here prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mtpbench.judge.compare import Comparison
from mtpbench.judge.plan import PRIMARY_SHARE, AlphaSplit, count_family, split_alpha
from mtpbench.judge.stats import certifiable_drop, clustered_ratio, detectable_drop, t_quantile
from mtpbench.shipped import data_root
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import Baseline, BaselineEntry, load_baseline

MAX_PROMPTS = 1_000_000
AL = -1  # the `pos` of the acceptance-length row

_BASELINES = data_root() / "baselines"  # the wheel's copy, else the source tree's
# The shipped per-prompt counts a baseline without its own is sized from, per speculative method (pair
# class): the embedded Gemma4 MTP pair on HumanEval's 150 prompts (the shipped default's baseline).
PRIORS = {"mtp": _BASELINES / "tiny-gemma4-mtp-humaneval-cpu.yaml"}
DEFAULT_PRIOR = PRIORS["mtp"]


@dataclass(frozen=True)
class Burst:
    """Drafts accepted in runs: per prompt a hidden hard regime (a two-state Markov chain over its drafts) on a
    share `hard_share` of the drafts holds `rejection_share` of the prompt's rejections; mean hard run
    `mean_run` drafts. The `bursty` level of benchmarks/gate_power.py, the noise the gate is measured under."""

    hard_share: float = 0.15
    rejection_share: float = 0.85
    mean_run: float = 8.0


BURSTY = Burst()


@dataclass(frozen=True)
class ContextSweep:
    """A context sweep's shape (workload.context): `buckets` context lengths, each holding the same `prompts`
    prompts; context-decay pairs every longer bucket with the first prompt by prompt (judge/signals/context.py), so
    its unit is the prompt of one bucket, not the run's prompts × buckets."""

    buckets: int
    prompts: int
    cells: int = 1  # the cells swept: each makes its own context-decay checks

    def checks(self, k: int) -> int:
        """The context-decay checks of a run (judge/signals/context.py context_checks, over its cells)."""
        return (self.buckets - 1) * k * self.cells if self.buckets > 1 else 0


@dataclass(frozen=True)
class PositionSize:
    pos: int  # AL (-1): acceptance length, in tokens per draft step; otherwise a position, as a fraction
    se: float | None  # of the paired difference at the check's own prompt count (`prompts`)
    detectable: float | None  # smallest drop caught with the gate's power, at `prompts`
    prompts_needed: int | None  # None: no spread to size from (fewer than two prompts)
    drop: float = 0.0  # δ in the row's unit
    primary: bool = False  # the gate's primary endpoint: also sized so that a harmless run certifies δ
    # graph (or build) divergence at this position: sized so that a harmless cell stays within δ of its reference
    divergence: bool = False
    # context decay at this position: sized so that a harmless longer bucket stays within δ of the first
    context: bool = False
    # The units the check pairs: the run's (or baseline's) prompts, or for context decay a bucket's prompts.
    prompts: int = 0

    @property
    def certifies(self) -> bool:
        return self.prompts_needed is not None and self.detectable is not None

    @property
    def fails_harmless(self) -> bool:
        """Whether this check can fail a harmless run beyond its α (inconclusive): its need is the run's."""
        return self.primary or self.divergence or self.context

    @property
    def enough(self) -> bool:
        return self.prompts_needed is not None and self.prompts >= self.prompts_needed


@dataclass(frozen=True)
class Sizing:
    entry: str
    prompts: int  # the prompts judged (the config's, the baseline's own, the pilot's), not the spread's source
    drafts_per_prompt: float
    checks: int
    split: AlphaSplit  # the run's false-alarm rate per primary check and per diagnosis (plan.split_alpha)
    source: str  # where the spread came from (pilot, the baseline's per-prompt counts, a prior), said as is
    positions: list[PositionSize]  # the AL row first, then the positions, then graph divergence
    floored: bool = False  # the bursty-drafts floor decided at least one row's spread
    notes: list[str] = field(default_factory=list)

    @property
    def prompts_needed(self) -> int | None:
        """What the run needs of its prompts: every check that can fail a harmless run and pairs whole prompts
        (the primary endpoint, divergence); context decay's need is per bucket (`bucket_prompts_needed`)."""
        return _most([p for p in self.positions if p.fails_harmless and not p.context])

    @property
    def bucket_prompts_needed(self) -> int | None:
        """What a context sweep needs per bucket (its context-decay rows); None without them."""
        return _most([p for p in self.positions if p.context])

    @property
    def certifies(self) -> bool:
        """Every check that can fail a harmless run has the prompts it needs, each counted in its own unit."""
        rows = [p for p in self.positions if p.fails_harmless]
        return bool(rows) and all(p.enough for p in rows)


def _most(rows: list[PositionSize]) -> int | None:
    need = [p.prompts_needed for p in rows]
    return None if not need or any(n is None for n in need) else max(n for n in need if n is not None)


def prompts_for(
    se: float, g: int, drop: float, alpha: float, power: float, cert: tuple[float, float] | None = None
) -> int:
    """Smallest prompt count G' whose detectable drop, with se scaled by √(g/G'), is at most `drop`; with
    `cert` = (the certificate's one-sided share, the harmless-failure share), also whose certifiable drop is.
    No spread at all: two prompts (the fewest with a standard error) already certify."""
    if se <= 0:
        return 2
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


def prompts_within(se: float, g: int, drop: float, share: float, sides: int = 2) -> int:
    """Smallest prompt count G' at which a harmless gap (true 0, se scaled by √(g/G')) stays within `drop` but
    for `share` of the time: se·√(g/G')·z_{1−share/sides} ≤ drop (`sides` 1: only a fall counts)."""
    if se <= 0:
        return 2
    z = t_quantile(1 - share / sides, None)
    return min(max(2, math.ceil(g * (se * z / drop) ** 2)), MAX_PROMPTS)


def primary_count(gate: GateSpec, cells: int, k: int) -> int:
    return cells * (1 if gate.primary == "acceptance_length" else k)


def bursty_se(drafts: np.ndarray, per_pos: np.ndarray, burst: Burst = BURSTY) -> tuple[float, list[float]] | None:
    """The standard error of the difference between two independent draws of these prompts (drafts per
    prompt, accepted per position per prompt) when drafts are accepted in runs (`burst`): of the AL and of each
    position's rate. Per prompt the variance of its accepted count over n drafts is n·Var(X) (X a draft's
    accepted tokens, the prefix property kept) plus the regimes' covariance, 2·(μ_hard − μ_easy)²·π(1−π)·
    Σ_l (n−l)·λ^l with λ = 1 − 1/run − π/((1−π)·run) the chain's autocorrelation; π is raised where a prompt's
    rejections need more room than k per hard draft. None without drafts."""
    total = float(drafts.sum())
    if total <= 0 or not len(drafts):
        return None
    k = per_pos.shape[1]
    var_al = 0.0
    var_pos = np.zeros(k)
    leave = 1.0 / burst.mean_run
    for n, accepted in zip(drafts, per_pos, strict=True):
        if n <= 0:
            continue
        rates = np.clip(accepted / n, 0.0, 1.0)
        mean = float(rates.sum())
        # E[X²] under the prefix property: position j accepted implies every i < j was.
        second = mean + 2.0 * sum(float(rates[j]) * j for j in range(k))
        var_x = max(second - mean**2, 0.0)
        rejected = k - mean
        hard = min(0.999, max(burst.hard_share, burst.rejection_share * rejected / k))
        lam = 1.0 - leave - leave * hard / (1.0 - hard)
        m = int(n)
        lags = np.arange(1, m)
        chain = float(((m - lags) * lam**lags).sum()) if m > 1 else 0.0
        spread = hard * (1.0 - hard) * chain * 2.0
        gap = burst.rejection_share * rejected / hard - (1.0 - burst.rejection_share) * rejected / (1.0 - hard)
        var_al += m * var_x + gap**2 * spread
        for i in range(k):
            miss = 1.0 - float(rates[i])
            gap_i = min(1.0, burst.rejection_share * miss / hard) - (1.0 - burst.rejection_share) * miss / (1.0 - hard)
            var_pos[i] += m * float(rates[i]) * miss + gap_i**2 * spread
    # Two independent draws of every prompt: the variances add.
    return math.sqrt(2.0 * var_al) / total, [float(math.sqrt(2.0 * v) / total) for v in var_pos]


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
    divergence: int = 0,
    floored: bool = False,
    units: int | None = None,
    context: ContextSweep | None = None,
) -> Sizing:
    """`prompts` the count the spreads `al` = (se of the AL difference, the baseline's AL) and `ses` (per
    position) were measured at; `units` the prompts the run judges (default `prompts`): the rows say their se
    and detectable drop there. `checks` the run's family, `primary` the checks a pass certifies
    (compare.Comparison.family / .primary), `divergence` its graph and build divergence checks (k per cell
    paired with its reference); `context` a context sweep, whose context-decay checks ((buckets − 1) · k,
    one-sided: only a fall counts) pair the prompts of one bucket."""
    units = prompts if units is None else units
    split = split_alpha(gate.false_alarm, primary, checks - primary)
    cert = ((1 - gate.confidence) / max(primary, 1), split.primary)
    rows = [(AL, al[0], gate.tolerance_al_pct / 100 * al[1], gate.primary == "acceptance_length")]
    rows += [(i, se, gate.tolerance_pts / 100, gate.primary == "positions") for i, se in enumerate(ses)]
    out = []
    for pos, se, drop, is_primary in rows:
        if se is None or prompts < 2 or units < 2:
            out.append(PositionSize(pos, se, None, None, drop, is_primary, prompts=units))
            continue
        alpha = split.primary if is_primary else split.diagnosis
        need = prompts_for(se, prompts, drop, alpha, gate.power, cert if is_primary else None)
        at = _scaled(se, prompts, units)
        detect = detectable_drop(at, units - 1, alpha, gate.power)
        out.append(PositionSize(pos, at, detect, need, drop, is_primary, prompts=units))
    context_checks = context.checks(len(ses)) if context is not None else 0
    # The diagnoses' part of the false-alarm rate, over the divergence and context checks: a harmless cell's
    # gap beyond gate.divergence_pts fails the run (exit 1, or 5 when not significant).
    share = gate.false_alarm * (1.0 - PRIMARY_SHARE if primary else 1.0) / max(divergence + context_checks, 1)
    drop = gate.divergence_pts / 100
    if divergence:
        for i, se in enumerate(ses):
            need = None if se is None or prompts < 2 else prompts_within(se, prompts, drop, share)
            at = None if se is None or units < 1 else _scaled(se, prompts, units)
            out.append(PositionSize(i, at, None, need, drop, divergence=True, prompts=units))
    if context is not None and context.buckets > 1:
        for i, se in enumerate(ses):
            need = None if se is None or prompts < 2 else prompts_within(se, prompts, drop, share, sides=1)
            at = None if se is None or context.prompts < 1 else _scaled(se, prompts, context.prompts)
            out.append(PositionSize(i, at, None, need, drop, context=True, prompts=context.prompts))
    return Sizing(entry, units, drafts_per_prompt, checks, split, source, out, floored)


def _scaled(se: float, measured_at: int, prompts: int) -> float:
    """A standard error measured over `measured_at` prompts, over `prompts` like them (1/√G)."""
    return se * math.sqrt(measured_at / prompts)


def _counts(entry: BaselineEntry) -> tuple[np.ndarray, np.ndarray] | None:
    if not entry.prompts:
        return None
    ids = list(entry.prompts)
    drafts = np.array([entry.prompts[p].num_drafts for p in ids], dtype=float)
    per_pos = np.array([entry.prompts[p].accepted_per_pos for p in ids], dtype=float).reshape(len(ids), -1)
    return drafts, per_pos


def _floor(measured: float | None, floor: float | None) -> tuple[float | None, bool]:
    if floor is None:
        return measured, False
    if measured is None or floor > measured:
        return floor, True
    return measured, False


def size_counts(
    name: str,
    drafts: np.ndarray,
    per_pos: np.ndarray,
    base_al: float,
    gate: GateSpec,
    checks: int,
    primary: int,
    source: str,
    divergence: int = 0,
    units: int | None = None,
    context: ContextSweep | None = None,
) -> Sizing:
    """From per-prompt counts (drafts, accepted per position): between-prompt spread × √2, floored by the
    bursty-drafts model of the same prompts; `units` the prompts judged (default: these counts' own)."""

    def se2(num: np.ndarray) -> float | None:
        se = clustered_ratio(num, drafts).se
        return None if se is None else math.sqrt(2) * se

    burst = bursty_se(drafts, per_pos)
    al_se, al_floored = _floor(se2(per_pos.sum(axis=1)), None if burst is None else burst[0])
    pos = [_floor(se2(per_pos[:, i]), None if burst is None else burst[1][i]) for i in range(per_pos.shape[1])]
    return size_from_ses(
        name,
        len(drafts),
        float(drafts.mean()) if len(drafts) else 0.0,
        (al_se, base_al),
        [se for se, _ in pos],
        gate,
        checks,
        primary,
        source,
        divergence,
        floored=al_floored or any(f for _, f in pos),
        units=units,
        context=context,
    )


def size_entry(
    entry: BaselineEntry,
    gate: GateSpec,
    checks: int,
    primary: int = 2,
    divergence: int = 0,
    units: int | None = None,
    context: ContextSweep | None = None,
) -> Sizing | None:
    """From the entry's per-prompt counts; None for an entry without them (size_baseline then uses a prior).
    `units`: the prompts the run judges (a config's), default the entry's own."""
    got = _counts(entry)
    if got is None:
        return None
    drafts, per_pos = got
    al = clustered_ratio(per_pos.sum(axis=1), drafts).value
    return size_counts(
        f"{entry.build}/{entry.mode}",
        drafts,
        per_pos,
        1.0 + (al or 0.0),
        gate,
        checks,
        primary,
        "the baseline's per-prompt counts: between-prompt spread x sqrt(2)",
        divergence,
        units,
        context,
    )


def size_prior(
    name: str,
    method: str,
    base_al: float | None,
    why: str,
    gate: GateSpec,
    checks: int,
    primary: int,
    divergence: int = 0,
    units: int | None = None,
    context: ContextSweep | None = None,
) -> Sizing:
    """From the shipped per-prompt counts of the pair class `method` (PRIORS, else the default's), δ on
    `base_al` (the prior's own AL when None); `why` says why a prior was needed. `units`: the prompts judged
    (the config's or the baseline's own count; None: the prior's, said in the source)."""
    path = PRIORS.get(method, DEFAULT_PRIOR)
    prior = load_baseline(path)
    entry = next(e for e in prior.entries if e.prompts)
    got = _counts(entry)
    assert got is not None  # the entry was chosen for its per-prompt counts
    drafts, per_pos = got
    al = base_al if base_al is not None else 1.0 + float(per_pos.sum() / drafts.sum())
    same = "the same pair class" if method in PRIORS else f"another pair class than {method}"
    return size_counts(
        name,
        drafts,
        per_pos,
        al,
        gate,
        checks,
        primary,
        f"a stated prior ({why}): the per-prompt counts of {path.name} ({entry.build}/{entry.mode}, {same}) "
        "x sqrt(2)"
        + (f", over {len(drafts)} prompts (the judged count is unknown)" if units is None else "")
        + "; a pilot run (size --run) measures the real spread",
        divergence,
        units,
        context,
    )


def size_baseline(
    baseline: Baseline,
    gate: GateSpec,
    checks: int,
    primary: int,
    divergence: int = 0,
    serving: bool | None = None,
    units: int | None = None,
    context: ContextSweep | None = None,
) -> list[Sizing]:
    """Every entry sized: from its own per-prompt counts, or (rates or pooled counts only) from the prior of
    its pair class, with the entry's own AL as δ's base. Always an answer, each saying where it came from.
    `serving`: only the entries of that workload (a run is compared with those alone); None: every entry.
    `units`: the prompts the run judges (a config's); None: the baseline's own (its per-prompt counts, else
    its fingerprint's prompt_count)."""
    out = []
    for e in baseline.entries:
        if serving is not None and (e.serving is not None) != serving:
            continue
        own = size_entry(e, gate, checks, primary, divergence, units, context)
        if own is not None:
            out.append(own)
            continue
        base_al = 1.0 + sum(e.rates_pct) / 100 if e.rates_pct else None
        why = "the baseline has rates only" if e.counts is None else "the baseline has pooled counts only"
        name = f"{e.build}/{e.mode}"
        judged = units if units is not None else baseline.fingerprint.prompt_count
        if units is None and e.serving is not None and e.serving.num_requests is not None:
            judged = e.serving.num_requests  # a serving entry pools its requests, not the offline set's prompts
        method = baseline.fingerprint.method
        out.append(size_prior(name, method, base_al, why, gate, checks, primary, divergence, judged, context))
    return out


def size_pilot(comp: Comparison, divergence: int | None = None) -> list[Sizing]:
    """From a pilot run's checks against the baseline: the spread the gate really faces, per cell (paired where
    the baseline has per-prompt counts, the run's own spread about fixed rates where it has not), floored by
    the bursty-drafts model of the pilot's own counts."""
    out = []
    lengths = {x.cell: x for x in comp.lengths}
    if divergence is None:
        # The family less the checks against the baseline (AL + k per cell) is graph divergence (plan.count_family).
        k = len(comp.checks) // max(len(comp.cells), 1)
        divergence = max(comp.family - len(comp.cells) * (k + 1), 0)
    for cell in dict.fromkeys(x.cell for x in comp.checks):
        xs = sorted((x for x in comp.checks if x.cell == cell), key=lambda x: x.pos)
        length = lengths.get(cell)
        if not xs or any(x.se is None for x in xs) or length is None or length.base_al is None:
            continue
        c = next(c for c in comp.cells if c.cell == cell)
        g = c.evidence.g
        drafts = c.evidence.drafts.astype(float) if g else np.zeros(0)
        burst = bursty_se(drafts, c.evidence.per_pos.astype(float)) if g else None
        al_se, al_floored = _floor(length.se, None if burst is None else burst[0])
        pos = [_floor(x.se, None if burst is None else burst[1][x.pos]) for x in xs]
        methods = sorted({x.method for x in xs})
        out.append(
            size_from_ses(
                cell,
                xs[0].prompts,
                float(drafts.mean()) if g else 0.0,
                (al_se, length.base_al),
                [se for se, _ in pos],
                comp.gate,
                comp.family,
                comp.primary,
                f"a pilot run against the baseline ({', '.join(methods)})",
                divergence,
                floored=al_floored or any(f for _, f in pos),
            )
        )
    return out


def family_of_config(
    k: int,
    cells: list[tuple[str, str, str]],
    reference_mode: str | None,
    reference_build: str | None = None,
    levels: int = 1,
) -> tuple[int, int]:
    """(the checks a run of these (build, mode, variant) cells makes, its divergence checks): its AL and k
    positions per cell against the baseline, k per graph/compiled cell against its eager reference, and k per
    cell of another build against the reference build's same mode and variant (plan.count_family,
    judge/signals/builds.py: the reference build is `reference_build`, else the first build listed); `levels`: a
    serving concurrency sweep's, each level after the first paired with the first in every cell
    (judge/signals/concurrency.py)."""
    distinct = list(dict.fromkeys(cells))
    refs = {(b, v) for b, m, v in distinct if m == reference_mode}
    pairs = sum(1 for b, m, v in distinct if m != reference_mode and (b, v) in refs)
    builds = list(dict.fromkeys(b for b, _, _ in distinct))
    if len(builds) > 1:
        ref_build = reference_build if reference_build in builds else builds[0]
        at_ref = {(m, v) for b, m, v in distinct if b == ref_build}
        pairs += sum(1 for b, m, v in distinct if b != ref_build and (m, v) in at_ref)
    pairs += (levels - 1) * len(distinct)
    family, _ = count_family(k, len(distinct), k * pairs, "acceptance_length")
    return family, k * pairs
