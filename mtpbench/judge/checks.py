"""A run's cells against a baseline, position by position, fail-closed: the baseline must be comparable
(a recorded mismatch of method, k, identity or sampling is refused; fields it cannot vouch for are named),
each cell is judged by one resolved entry, and each position's drop is decided by the gate's rule (`decide`:
regression, pass, improvement, or `inconclusive` when the data cannot support either). compare.judge
calls these; the checks become structured findings here. Nothing here prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from mtpbench.errors import NotComparableError, UserError
from mtpbench.judge.evidence import CellResult
from mtpbench.judge.findings import Cause, Finding, Kind, LengthChecks, PositionChecks, Severity, Verdict
from mtpbench.judge.stats import (
    Estimate,
    Interval,
    PromptCounts,
    binomial_se,
    clustered_ratio,
    detectable_drop,
    gate_threshold,
    lower_bound,
    mover_diff,
    paired_diff,
    two_sided,
    welch_df,
    wilson,
)
from mtpbench.schema import COUNTERS_ONLY
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import Baseline, BaselineEntry, BaselineFingerprint, run_fingerprint, same_k
from mtpbench.store.results import Run


@dataclass
class PositionCheck:
    cell: str
    pos: int
    run_rate: float | None
    base_rate: float | None
    delta: float | None
    ci: Interval | None
    verdict: Verdict
    mde: float | None = None  # smallest drop the rule catches with the gate's power (stats.detectable_drop)
    underpowered: bool = False
    prompts: int = 0  # prompts the comparison rests on
    method: str = ""  # paired | pooled-baseline | exact-baseline | counters-only
    entry: str = ""  # build/mode of the baseline entry
    bound: float | None = None  # one-sided lower bound on delta at the check's share of the false-alarm rate
    se: float | None = None  # of delta (the paired one when paired)


@dataclass
class LengthCheck:
    """The primary endpoint of a cell against its baseline entry: acceptance length (AL, tokens per draft
    step). `delta`, `ci`, `mde`, `bound` and `tolerance` are in tokens; `tolerance` is δ (tolerance_al_pct %
    of the baseline's AL)."""

    cell: str
    run_al: float | None
    base_al: float | None
    delta: float | None
    ci: Interval | None
    verdict: Verdict
    tolerance: float = 0.0
    mde: float | None = None
    underpowered: bool = False
    prompts: int = 0
    method: str = ""
    entry: str = ""
    bound: float | None = None
    se: float | None = None


# Fingerprint fields that identify what was measured; a baseline that leaves one null cannot vouch for it.
IDENTITY_FIELDS = (
    "model_config_sha256",
    "drafter_config_sha256",
    "model_weights_sha256",
    "drafter_weights_sha256",
    "prompts_sha256",
)
# The method's own settings in the fingerprint (an n-gram lookup's bounds, …), named as the config names them.
EXTRA_FIELD = "speculative.extra"


def _same_value(a: Any, b: Any) -> bool:
    numeric = (int, float)
    if isinstance(a, numeric) and isinstance(b, numeric) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return bool(a == b)


def check_comparable(run: Run, baseline: Baseline, baseline_name: str = "") -> list[str]:
    """Raise NotComparableError on any recorded mismatch; return the fields the baseline could not vouch for."""
    rf = run_fingerprint(run)
    bf = baseline.fingerprint
    unchecked: list[str] = []
    spec = run.typed.config.speculative
    mismatches = speculative_mismatches(
        rf["method"], spec.num_speculative_tokens, rf["speculative_extra"], bf, unchecked
    )
    for key in IDENTITY_FIELDS:
        want = getattr(bf, key, None)
        if want is None:
            unchecked.append(key)
        elif rf.get(key) != want:
            mismatches.append(f"{key} {str(rf.get(key))[:12]} vs baseline {want[:12]}")
    for key, want in bf.sampling.items():
        have = rf["sampling"].get(key)
        if not _same_value(have, want):
            mismatches.append(f"sampling.{key}={have} vs baseline {want}")
    if "temperature" not in bf.sampling:
        unchecked.append("sampling.temperature")
    if mismatches:
        name = baseline_name or baseline.name
        raise NotComparableError(
            f"run {run.run_id} is not comparable with baseline {name}: " + "; ".join(mismatches),
            run.run_id,
            name,
            mismatches,
            unchecked,
        )
    return unchecked


def speculative_mismatches(
    method: str, k: int | list[int], extra: dict[str, Any], bf: BaselineFingerprint, unchecked: list[str]
) -> list[str]:
    """What of the speculative config (method, k, the method's settings) the baseline was not measured with:
    what a config alone decides, so `run` says it before any engine starts, as the judging does after."""
    out: list[str] = []
    if method.lower() != bf.method.lower():
        out.append(f"method {method} vs baseline {bf.method}")
    # Each k the run measures needs the baseline's entries of that k (a k sweep, issue 38); for one k on both
    # sides this is equality, as it always was.
    if not set(k if isinstance(k, list) else [k]) <= set(bf.ks):
        out.append(f"k={k} vs baseline k={bf.num_speculative_tokens}")
    return out + _extra_mismatches(extra, bf.speculative_extra, unchecked)


def _extra_mismatches(have: dict[str, Any], want: dict[str, Any] | None, unchecked: list[str]) -> list[str]:
    """The method's settings (`speculative.extra`) that differ, key by key; a key one side lacks differs from
    one it sets (vLLM's defaults move between releases). A baseline from before the field (`want` None)
    cannot say which it ran: listed as unchecked when the run sets any (used only when the run's config
    names it, or with --accept-unchecked), else read as none, as a run without them would have saved it."""
    if want is None:
        if have:
            unchecked.append(EXTRA_FIELD)
        return []
    return [
        f"{EXTRA_FIELD}.{key}={have.get(key)} vs baseline {want.get(key)}"
        for key in sorted(set(have) | set(want))
        if not (key in have and key in want and _same_value(have[key], want[key]))
    ]


def config_names_baseline(run: Run, baseline: Baseline, baseline_path: str | Path | None) -> bool:
    """Did the run's own config name this baseline? (Then it vouches for what the baseline cannot.) The
    same path, the same file name (another checkout), or a file named after the baseline."""
    named = run.typed.config.baseline
    if not named:
        return False
    a = Path(str(named))
    if a.stem == baseline.name:
        return True
    if baseline_path is None:
        return False
    b = Path(baseline_path)
    try:
        if a.resolve() == b.resolve():
            return True
    except OSError:
        pass
    return a.name == b.name


def resolve_entry(
    baseline: Baseline, cell: CellResult, entry_map: dict[str, str], baseline_name: str
) -> tuple[BaselineEntry | None, str]:
    """The entry judging a cell and why: the config's `baseline_entry` map first, then the baseline's own
    keys (exact build/mode, wildcards, the requested graph mode). (None, "") when nothing matches."""
    # The cell's k: a k sweep's own, else the run's (its evidence's width), so a single-k run meets a k sweep
    # baseline's entry of its k, not the first entry listed.
    k = cell.k if cell.k is not None else cell.evidence.k
    for key in (cell.cell, f"{cell.build}/{cell.mode}"):
        if key in entry_map:
            entry_build, entry_mode = entry_map[key].split("/", 1)
            for entry in baseline.entries:
                if entry.build == entry_build and entry.mode == entry_mode and same_k(entry, k):
                    return entry, "config"
            raise UserError(f"baseline_entry {key!r}: {entry_map[key]!r} is not an entry of baseline {baseline_name}")
    entry = baseline.entry_for(cell.build, cell.mode, cell.requested.get("cudagraph_mode"), k)
    return entry, ("baseline" if entry is not None else "")


def decide(
    delta: float, se: float | None, df: float | None, drop: float, gate: GateSpec, alpha: float, cert_alpha: float
) -> Verdict:
    """The gate's rule for one check (δ = `drop`; α = the run's false-alarm rate split over its checks; the
    certification share = 1 − gate.confidence split over the run's primary checks): regression when the
    estimate is below −θ, θ = max(t_{1−α}·se, δ − t_{power}·se) (significant, and a δ drop is caught with
    the gate's power); pass when the one-sided lower bound Δ − t_{1−cert}·se is above −δ (a drop of δ is
    excluded at the stated confidence: "we would have seen it"); improvement when above +θ; otherwise
    inconclusive. Regression is decided first: it is the error the gate's α controls. Without a standard
    error (one prompt) nothing can be certified: inconclusive."""
    if se is None:
        return Verdict.INCONCLUSIVE
    theta = gate_threshold(se, df, drop, alpha, gate.power)
    if delta < -theta:
        return Verdict.REGRESSION
    if delta > theta:
        return Verdict.IMPROVEMENT
    if lower_bound(delta, se, df, cert_alpha) > -drop:
        return Verdict.PASS
    return Verdict.INCONCLUSIVE


def _point_verdict(delta: float, tol: float) -> Verdict:  # counters-only: the point estimate decides
    return Verdict.REGRESSION if delta < -tol else Verdict.IMPROVEMENT if delta > tol else Verdict.PASS


def _counters_only_check(cell: CellResult, i: int, entry: BaselineEntry, tol: float, label: str) -> PositionCheck:
    """A counters-only serving cell: one pooled /metrics count per cell-repeat, so there is no sample of
    requests or prompts to cluster, no standard error, no interval and no detectable-drop figure. The
    offline rule for a CI of None (stats.clustered_ratio with g < 2) would call any drop beyond the
    tolerance `inconclusive` (exit 5), so the seed's 63.4 % -> 5.3 % collapse would never fail the gate;
    calling the point estimate alone a pass would be greener than the evidence. So the point estimate
    decides both ways (a drop beyond the tolerance is a regression, exit 1; a gain beyond it an
    improvement), and a pass is always `underpowered` (its MDE is unknown): a warning naming the
    method, a failure under gate.fail_on_underpowered. A pass is never claimed with an interval."""
    tot = cell.evidence.total()
    if tot.num_drafts <= 0 or i >= len(tot.accepted_per_pos):
        return PositionCheck(
            cell=cell.cell,
            pos=i,
            run_rate=None,
            base_rate=entry.rates_pct[i] / 100,
            delta=None,
            ci=None,
            verdict=Verdict.NO_DATA,
            method=COUNTERS_ONLY,
            entry=label,
        )
    run_rate = tot.accepted_per_pos[i] / tot.num_drafts
    base_counts = entry.counts
    pooled = base_counts is not None and base_counts.num_drafts > 0
    if base_counts is not None and pooled:
        base_rate = base_counts.accepted_per_pos[i] / base_counts.num_drafts
    else:
        base_rate = entry.rates_pct[i] / 100
    delta = run_rate - base_rate
    verdict = _point_verdict(delta, tol)
    return PositionCheck(
        cell=cell.cell,
        pos=i,
        run_rate=run_rate,
        base_rate=base_rate,
        delta=delta,
        ci=None,
        verdict=verdict,
        mde=None,
        underpowered=True,
        prompts=0,
        method=COUNTERS_ONLY,
        entry=label,
    )


@dataclass(frozen=True)
class _Diff:
    """One estimand (a position's rate, or accepted tokens per draft) of a cell against its baseline entry."""

    run: float
    base: float
    delta: float | None
    ci: Interval | None
    method: str
    prompts: int
    se: float | None
    df: float | None


Column = Callable[[np.ndarray], np.ndarray]  # (G, k) accepted per position -> (G,) the estimand's numerator


def _base_prompts(entry: BaselineEntry) -> PromptCounts | None:
    if not entry.prompts:
        return None
    ids = list(entry.prompts)
    return PromptCounts(
        ids=tuple(ids),
        drafts=np.array([entry.prompts[p].num_drafts for p in ids]),
        draft_tokens=np.array([entry.prompts[p].num_draft_tokens for p in ids]),
        accepted=np.array([entry.prompts[p].num_accepted_tokens for p in ids]),
        per_pos=np.array([entry.prompts[p].accepted_per_pos for p in ids]).reshape(len(ids), -1),
    )


def aligned_with(cell: CellResult, entry: BaselineEntry) -> tuple[PromptCounts, PromptCounts] | None:
    """The cell's evidence and the entry's per-prompt counts on the prompts both have, row for row (None: the
    entry kept none). Made once per cell: its AL check and every position check read the same pair."""
    base = _base_prompts(entry)
    return None if base is None else cell.evidence.align(base)


def _diff(
    cell: CellResult,
    entry: BaselineEntry,
    col: Column,
    exact_base: float,
    conf: float,
    positions: list[int],
    aligned: tuple[PromptCounts, PromptCounts] | None,
) -> _Diff | None:
    """The cell's estimate minus the baseline's, by the best method the entry allows: paired prompt by prompt
    (per-prompt counts: the prompts' own difficulty cancels), against pooled counts (MOVER with Wilson for one
    position; a normal interval on the summed positions, whose pooled se is bounded by the sum of the
    positions' binomial ones), or against published rates taken as exact. None: the run has no estimate."""
    ev = cell.evidence
    run_est = clustered_ratio(col(ev.per_pos), ev.drafts, conf) if ev.g else Estimate(None)
    if run_est.value is None:
        return None
    if aligned is not None and aligned[0].g:
        a, b = aligned
        est = paired_diff(col(a.per_pos), a.drafts, col(b.per_pos), b.drafts, conf)
        run_aligned = clustered_ratio(col(a.per_pos), a.drafts, conf)
        base_aligned = clustered_ratio(col(b.per_pos), b.drafts, conf)
        return _Diff(
            run=run_est.value if run_aligned.value is None else run_aligned.value,
            base=exact_base if base_aligned.value is None else base_aligned.value,
            delta=est.value,
            ci=est.ci,
            method="paired",
            prompts=a.g,
            se=est.se,
            df=est.df,
        )
    base_counts = entry.counts
    if base_counts is not None and base_counts.num_drafts > 0:
        base = sum(base_counts.accepted_per_pos[i] for i in positions) / base_counts.num_drafts
        delta = run_est.value - base
        se_b = sum(binomial_se(base_counts.accepted_per_pos[i], base_counts.num_drafts) or 0.0 for i in positions)
        se = None if run_est.se is None else math.sqrt(run_est.se**2 + se_b**2)
        df = None if run_est.se is None else welch_df(run_est.se, run_est.df, se_b, math.inf)
        if len(positions) == 1:
            base_wilson = wilson(base_counts.accepted_per_pos[positions[0]], base_counts.num_drafts, conf)
            ci = mover_diff(run_est.value, run_est.ci, base, base_wilson) if run_est.ci and base_wilson else None
        else:
            ci = None if se is None else two_sided(delta, se, df, conf)
        return _Diff(
            run=run_est.value, base=base, delta=delta, ci=ci, method="pooled-baseline", prompts=ev.g, se=se, df=df
        )
    ci = None if run_est.ci is None else Interval(run_est.ci.low - exact_base, run_est.ci.high - exact_base)
    return _Diff(
        run=run_est.value,
        base=exact_base,
        delta=run_est.value - exact_base,
        ci=ci,
        method="exact-baseline",
        prompts=ev.g,
        se=run_est.se,
        df=run_est.df,
    )


def position_check(
    cell: CellResult,
    i: int,
    entry: BaselineEntry,
    gate: GateSpec,
    alpha: float,
    cert_alpha: float,
    aligned: tuple[PromptCounts, PromptCounts] | None,
) -> PositionCheck:
    tol = gate.tolerance_pts / 100
    label = f"{entry.build}/{entry.mode}"
    if cell.counters_only:
        return _counters_only_check(cell, i, entry, tol, label)
    base_rate = entry.rates_pct[i] / 100
    diff = _diff(cell, entry, lambda m: m[:, i], base_rate, gate.confidence, [i], aligned)
    if diff is None or diff.delta is None:
        return PositionCheck(
            cell=cell.cell,
            pos=i,
            run_rate=None if diff is None else diff.run,
            base_rate=base_rate,
            delta=None,
            ci=None,
            verdict=Verdict.NO_DATA,
            entry=label,
        )
    decided = _decided(diff, tol, gate, alpha, cert_alpha, label)
    return PositionCheck(cell=cell.cell, pos=i, run_rate=diff.run, base_rate=diff.base, **decided)


class _Decided(TypedDict):
    """What a position check and a length check share once the gate's rule has decided a difference."""

    delta: float
    ci: Interval | None
    verdict: Verdict
    mde: float | None
    underpowered: bool
    prompts: int
    method: str
    entry: str
    bound: float | None
    se: float | None


def _decided(diff: _Diff, tol: float, gate: GateSpec, alpha: float, cert_alpha: float, label: str) -> _Decided:
    """`diff` (its delta known) decided by the gate's rule with δ = `tol`, in the check's own unit."""
    assert diff.delta is not None  # the callers return NO_DATA before
    verdict = decide(diff.delta, diff.se, diff.df, tol, gate, alpha, cert_alpha)
    smallest = detectable_drop(diff.se, diff.df, alpha, gate.power)
    return _Decided(
        delta=diff.delta,
        ci=diff.ci,
        verdict=verdict,
        mde=smallest,
        # Only a check that could not certify δ is underpowered: a pass has certified it.
        underpowered=verdict == Verdict.INCONCLUSIVE and (smallest is None or smallest > tol),
        prompts=diff.prompts,
        method=diff.method,
        entry=label,
        bound=None if diff.se is None else lower_bound(diff.delta, diff.se, diff.df, cert_alpha),
        se=diff.se,
    )


def length_check(
    cell: CellResult,
    entry: BaselineEntry,
    gate: GateSpec,
    alpha: float,
    cert_alpha: float,
    aligned: tuple[PromptCounts, PromptCounts] | None,
) -> LengthCheck:
    """The primary endpoint: acceptance length (1 + accepted tokens per draft step, over all k positions of
    the entry) against the entry's, δ = gate.tolerance_al_pct % of the entry's AL, by the same rule."""
    k = len(entry.rates_pct)
    label = f"{entry.build}/{entry.mode}"
    exact = 1.0 + sum(entry.rates_pct) / 100
    if not cell.counters_only and cell.evidence.g and cell.evidence.k < k:
        return _no_length(cell, exact, label)
    if cell.counters_only:
        tot = cell.evidence.total()
        if tot.num_drafts <= 0 or len(tot.accepted_per_pos) < k:
            return _no_length(cell, exact, label, method=COUNTERS_ONLY)
        base_counts = entry.counts
        if base_counts is not None and base_counts.num_drafts > 0:
            base = 1.0 + sum(base_counts.accepted_per_pos[:k]) / base_counts.num_drafts
        else:
            base = exact
        run = 1.0 + sum(tot.accepted_per_pos[:k]) / tot.num_drafts
        tol = gate.tolerance_al_pct / 100 * base
        delta = run - base
        verdict = _point_verdict(delta, tol)
        return LengthCheck(
            cell=cell.cell,
            run_al=run,
            base_al=base,
            delta=delta,
            ci=None,
            verdict=verdict,
            tolerance=tol,
            underpowered=True,
            method=COUNTERS_ONLY,
            entry=label,
        )
    diff = _diff(cell, entry, lambda m: m[:, :k].sum(axis=1), exact - 1.0, gate.confidence, list(range(k)), aligned)
    if diff is None or diff.delta is None:
        return _no_length(cell, exact, label, run_al=None if diff is None else 1.0 + diff.run)
    base = 1.0 + diff.base
    tol = gate.tolerance_al_pct / 100 * base
    decided = _decided(diff, tol, gate, alpha, cert_alpha, label)
    return LengthCheck(cell=cell.cell, run_al=1.0 + diff.run, base_al=base, tolerance=tol, **decided)


def _no_length(
    cell: CellResult, base_al: float, label: str, *, run_al: float | None = None, method: str = ""
) -> LengthCheck:
    """An AL check with nothing to decide: no drafts, or fewer positions than the entry's."""
    return LengthCheck(
        cell=cell.cell,
        run_al=run_al,
        base_al=base_al,
        delta=None,
        ci=None,
        verdict=Verdict.NO_DATA,
        method=method,
        entry=label,
    )


def check_findings(
    cell: CellResult, checks: list[PositionCheck], length: LengthCheck | None, gate: GateSpec
) -> list[Finding]:
    """The cell's checks as findings. The primary endpoint (gate.primary) is what a pass certifies: its
    inconclusive fails (exit 5) and its underpowered pass warns. The other endpoint is a diagnosis: a drop
    it finds significant and relevant still fails (exit 1: it is in the run's false-alarm budget), and what
    it could not certify is said (info), not failed."""
    out: list[Finding] = []
    al_primary = gate.primary == "acceptance_length"

    def numbers(xs: list[PositionCheck], check: str | None = None) -> PositionChecks:
        return PositionChecks(
            check=check,
            positions=[x.pos for x in xs],
            run_rates=[x.run_rate for x in xs],
            base_rates=[x.base_rate for x in xs],
            deltas=[x.delta for x in xs],
            cis=[None if x.ci is None else [x.ci.low, x.ci.high] for x in xs],
            mdes=[x.mde for x in xs],
            prompts=max((x.prompts for x in xs), default=0),
            tolerance_pts=gate.tolerance_pts,
            confidence=gate.confidence,
            power=gate.power,
            entry=xs[0].entry if xs else "",
            method=COUNTERS_ONLY if any(x.method == COUNTERS_ONLY for x in xs) else None,
        )

    def weak_sev() -> Severity:
        return Severity.FAIL if gate.fail_on_underpowered else Severity.WARN

    # More prompts would not help a counters-only cell: per-request counts would.
    weak_why = Cause.NO_PER_REQUEST_COUNTS if cell.counters_only else Cause.TOO_LITTLE_EVIDENCE
    if length is not None:
        n = LengthChecks(
            run_al=length.run_al,
            base_al=length.base_al,
            delta=length.delta,
            ci=None if length.ci is None else [length.ci.low, length.ci.high],
            mde=length.mde,
            prompts=length.prompts,
            tolerance=length.tolerance,
            tolerance_pct=gate.tolerance_al_pct,
            confidence=gate.confidence,
            power=gate.power,
            entry=length.entry,
            primary=al_primary,
            method=COUNTERS_ONLY if length.method == COUNTERS_ONLY else None,
        )
        if length.verdict == Verdict.REGRESSION:
            out.append(Finding(Kind.REGRESSION, Severity.FAIL, cell.cell, Cause.DRAFTER_ACCEPTANCE, n))
        elif length.verdict == Verdict.INCONCLUSIVE:
            sev = Severity.FAIL if al_primary else Severity.INFO
            out.append(Finding(Kind.INCONCLUSIVE, sev, cell.cell, Cause.TOO_LITTLE_EVIDENCE, n))
        elif length.verdict == Verdict.IMPROVEMENT:
            sev = Severity.FAIL if gate.fail_on_improvement else Severity.INFO
            out.append(Finding(Kind.IMPROVEMENT, sev, cell.cell, Cause.STALE_BASELINE, n))
        elif length.verdict == Verdict.PASS and length.underpowered and al_primary:
            out.append(Finding(Kind.UNDERPOWERED, weak_sev(), cell.cell, weak_why, n))
    by = {v: [x for x in checks if x.verdict == v] for v in Verdict}
    if by[Verdict.REGRESSION]:
        out.append(
            Finding(
                Kind.REGRESSION, Severity.FAIL, cell.cell, Cause.DRAFTER_ACCEPTANCE, numbers(by[Verdict.REGRESSION])
            )
        )
    if by[Verdict.INCONCLUSIVE]:
        sev = Severity.INFO if al_primary else Severity.FAIL
        check = "positions" if al_primary else "baseline"
        out.append(
            Finding(
                Kind.INCONCLUSIVE, sev, cell.cell, Cause.TOO_LITTLE_EVIDENCE, numbers(by[Verdict.INCONCLUSIVE], check)
            )
        )
    if by[Verdict.IMPROVEMENT]:
        sev = Severity.FAIL if gate.fail_on_improvement else Severity.INFO
        out.append(Finding(Kind.IMPROVEMENT, sev, cell.cell, Cause.STALE_BASELINE, numbers(by[Verdict.IMPROVEMENT])))
    weak = [x for x in by[Verdict.PASS] if x.underpowered]
    if weak and not al_primary:
        out.append(Finding(Kind.UNDERPOWERED, weak_sev(), cell.cell, weak_why, numbers(weak)))
    return out
