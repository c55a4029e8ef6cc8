"""A run's cells against a baseline, position by position, fail-closed: the baseline must be comparable
(a recorded mismatch of method, k, identity or sampling is refused; fields it cannot vouch for are named),
each cell is judged by one resolved entry, and each position's drop is decided by the gate's rule (`_decide`:
regression, pass, improvement, or `inconclusive` when the data cannot support either). compare.compare
calls these; the checks become structured findings here. Nothing here prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mtpbench.errors import NotComparableError, UserError
from mtpbench.judge.evidence import CellResult
from mtpbench.judge.findings import Cause, Finding, Kind, PositionChecks, Severity, Verdict
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
    welch_df,
    wilson,
)
from mtpbench.schema import COUNTERS_ONLY
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import Baseline, BaselineEntry, run_fingerprint
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


# Fingerprint fields that identify what was measured; a baseline that leaves one null cannot vouch for it.
IDENTITY_FIELDS = (
    "model_config_sha256", "drafter_config_sha256", "model_weights_sha256", "drafter_weights_sha256",
    "prompts_sha256",
)


def _same_value(a: Any, b: Any) -> bool:
    numeric = (int, float)
    if isinstance(a, numeric) and isinstance(b, numeric) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return bool(a == b)


def check_comparable(run: Run, baseline: Baseline, baseline_name: str = "") -> list[str]:
    """Raise NotComparableError on any recorded mismatch; return the fields the baseline could not vouch for."""
    rf = run_fingerprint(run)
    bf = baseline.fingerprint
    mismatches: list[str] = []
    unchecked: list[str] = []
    if rf["method"].lower() != bf.method.lower():
        mismatches.append(f"method {rf['method']} vs baseline {bf.method}")
    if int(rf["num_speculative_tokens"]) != bf.num_speculative_tokens:
        mismatches.append(f"k={rf['num_speculative_tokens']} vs baseline k={bf.num_speculative_tokens}")
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
            run.run_id, name, mismatches, unchecked,
        )
    return unchecked


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
    for key in (cell.cell, f"{cell.build}/{cell.mode}"):
        if key in entry_map:
            eb, em = entry_map[key].split("/", 1)
            for e in baseline.entries:
                if e.build == eb and e.mode == em:
                    return e, "config"
            raise UserError(f"baseline_entry {key!r}: {entry_map[key]!r} is not an entry of baseline {baseline_name}")
    e = baseline.entry_for(cell.build, cell.mode, cell.requested.get("cudagraph_mode"))
    return e, ("baseline" if e is not None else "")


def _decide(delta: float, se: float | None, df: float | None, gate: GateSpec, alpha: float) -> Verdict:
    """The gate's rule for one check (δ = gate.tolerance_pts, α = the run's false-alarm rate split over its
    checks): regression when the estimate is below −θ, θ = max(t_{1−α}·se, δ − t_{power}·se) (significant,
    and a δ drop is caught with the gate's power); pass when the one-sided lower bound Δ − t_{1−α}·se is above
    −δ (a drop of δ is excluded: "we would have seen it"); improvement when above +θ; otherwise
    inconclusive. The two cannot both hold while t_{1−α} > t_{power}. Without a standard error (one prompt)
    nothing can be certified: inconclusive."""
    if se is None:
        return Verdict.INCONCLUSIVE
    drop = gate.tolerance_pts / 100
    theta = gate_threshold(se, df, drop, alpha, gate.power)
    if delta < -theta:
        return Verdict.REGRESSION
    if delta > theta:
        return Verdict.IMPROVEMENT
    if lower_bound(delta, se, df, alpha) > -drop:
        return Verdict.PASS
    return Verdict.INCONCLUSIVE


def _counters_only_check(c: CellResult, i: int, entry: BaselineEntry, tol: float, label: str) -> PositionCheck:
    """A counters-only serving cell: one pooled /metrics count per cell-repeat, so there is no sample of
    requests or prompts to cluster, no standard error, no interval and no detectable-drop figure. The
    offline rule for a CI of None (stats.clustered_ratio with g < 2) would call any drop beyond the
    tolerance `inconclusive` (exit 5), so the seed's 63.4 % -> 5.3 % collapse would never fail the gate;
    calling the point estimate alone a pass would be greener than the evidence. So the point estimate
    decides both ways (a drop beyond the tolerance is a regression, exit 1; a gain beyond it an
    improvement), and a pass is always `underpowered` (its MDE is unknown): a warning naming the
    method, a failure under gate.fail_on_underpowered. A pass is never claimed with an interval."""
    tot = c.evidence.total()
    if tot.num_drafts <= 0 or i >= len(tot.accepted_per_pos):
        return PositionCheck(c.cell, i, None, entry.rates_pct[i] / 100, None, None, Verdict.NO_DATA,
                             method=COUNTERS_ONLY, entry=label)
    run_rate = tot.accepted_per_pos[i] / tot.num_drafts
    bc = entry.counts
    pooled = bc is not None and bc.num_drafts > 0
    base_rate = bc.accepted_per_pos[i] / bc.num_drafts if bc is not None and pooled else entry.rates_pct[i] / 100
    delta = run_rate - base_rate
    verdict = Verdict.REGRESSION if delta < -tol else Verdict.IMPROVEMENT if delta > tol else Verdict.PASS
    return PositionCheck(c.cell, i, run_rate, base_rate, delta, None, verdict, None, underpowered=True, prompts=0,
                         method=COUNTERS_ONLY, entry=label)


def _position_check(c: CellResult, i: int, entry: BaselineEntry, gate: GateSpec, alpha: float) -> PositionCheck:
    ev, conf, tol = c.evidence, gate.confidence, gate.tolerance_pts / 100
    label = f"{entry.build}/{entry.mode}"
    if c.counters_only:
        return _counters_only_check(c, i, entry, tol, label)
    base_rate = entry.rates_pct[i] / 100
    run_est = clustered_ratio(ev.per_pos[:, i], ev.drafts, conf) if ev.g else Estimate(None)
    if run_est.value is None:
        return PositionCheck(c.cell, i, None, base_rate, None, None, Verdict.NO_DATA, entry=label)
    base_prompts = None
    if entry.prompts:
        ids = list(entry.prompts)
        base_prompts = PromptCounts(
            tuple(ids),
            np.array([entry.prompts[p].num_drafts for p in ids]),
            np.array([entry.prompts[p].num_draft_tokens for p in ids]),
            np.array([entry.prompts[p].num_accepted_tokens for p in ids]),
            np.array([entry.prompts[p].accepted_per_pos for p in ids]).reshape(len(ids), -1),
        )
    a, b = ev.align(base_prompts) if base_prompts is not None else (ev, ev)
    if base_prompts is not None and a.g:
        # Paired prompt by prompt: the prompts' own difficulty cancels, the spread left is the change's.
        est = paired_diff(a.per_pos[:, i], a.drafts, b.per_pos[:, i], b.drafts, conf)
        ea = clustered_ratio(a.per_pos[:, i], a.drafts, conf)
        eb = clustered_ratio(b.per_pos[:, i], b.drafts, conf)
        run_rate, base_rate = ea.value, base_rate if eb.value is None else eb.value
        delta, ci, method, n, se, df = est.value, est.ci, "paired", a.g, est.se, est.df
    elif entry.counts is not None and entry.counts.num_drafts > 0:
        bc = entry.counts
        base_rate = bc.accepted_per_pos[i] / bc.num_drafts
        wb = wilson(bc.accepted_per_pos[i], bc.num_drafts, conf)
        run_rate, delta = run_est.value, run_est.value - base_rate
        ci = mover_diff(run_est.value, run_est.ci, base_rate, wb) if run_est.ci and wb else None
        method, n = "pooled-baseline", ev.g
        se_b = binomial_se(bc.accepted_per_pos[i], bc.num_drafts) or 0.0
        se = None if run_est.se is None else math.sqrt(run_est.se**2 + se_b**2)
        df = None if run_est.se is None else welch_df(run_est.se, run_est.df, se_b, math.inf)
    else:
        run_rate, delta = run_est.value, run_est.value - base_rate
        ci = None if run_est.ci is None else Interval(run_est.ci.low - base_rate, run_est.ci.high - base_rate)
        method, n, se, df = "exact-baseline", ev.g, run_est.se, run_est.df
    if delta is None:
        return PositionCheck(c.cell, i, run_rate, base_rate, None, None, Verdict.NO_DATA, entry=label)
    verdict = _decide(delta, se, df, gate, alpha)
    smallest = detectable_drop(se, df, alpha, gate.power)
    return PositionCheck(
        c.cell, i, run_rate, base_rate, delta, ci, verdict, smallest,
        # Only a check that could not certify δ is underpowered: a pass has certified it.
        underpowered=verdict == Verdict.INCONCLUSIVE and (smallest is None or smallest > tol),
        prompts=n, method=method, entry=label,
        bound=None if se is None else lower_bound(delta, se, df, alpha), se=se,
    )


def _check_findings(c: CellResult, checks: list[PositionCheck], gate: GateSpec) -> list[Finding]:
    out: list[Finding] = []

    def numbers(xs: list[PositionCheck], check: str | None = None) -> PositionChecks:
        return PositionChecks(
            check=check, positions=[x.pos for x in xs], run_rates=[x.run_rate for x in xs],
            base_rates=[x.base_rate for x in xs], deltas=[x.delta for x in xs],
            cis=[None if x.ci is None else [x.ci.low, x.ci.high] for x in xs], mdes=[x.mde for x in xs],
            prompts=max((x.prompts for x in xs), default=0), tolerance_pts=gate.tolerance_pts,
            confidence=gate.confidence, power=gate.power, entry=xs[0].entry if xs else "",
            method=COUNTERS_ONLY if any(x.method == COUNTERS_ONLY for x in xs) else None,
        )

    by = {v: [x for x in checks if x.verdict == v] for v in Verdict}
    if by[Verdict.REGRESSION]:
        out.append(Finding(Kind.REGRESSION, Severity.FAIL, c.cell, Cause.DRAFTER_ACCEPTANCE,
                           numbers(by[Verdict.REGRESSION])))
    if by[Verdict.INCONCLUSIVE]:
        out.append(Finding(Kind.INCONCLUSIVE, Severity.FAIL, c.cell, Cause.TOO_LITTLE_EVIDENCE,
                           numbers(by[Verdict.INCONCLUSIVE], "baseline")))
    if by[Verdict.IMPROVEMENT]:
        sev = Severity.FAIL if gate.fail_on_improvement else Severity.INFO
        out.append(Finding(Kind.IMPROVEMENT, sev, c.cell, Cause.STALE_BASELINE, numbers(by[Verdict.IMPROVEMENT])))
    weak = [x for x in by[Verdict.PASS] if x.underpowered]
    if weak:
        sev = Severity.FAIL if gate.fail_on_underpowered else Severity.WARN
        # More prompts would not help a counters-only cell: per-request counts would.
        why = Cause.NO_PER_REQUEST_COUNTS if c.counters_only else Cause.TOO_LITTLE_EVIDENCE
        out.append(Finding(Kind.UNDERPOWERED, sev, c.cell, why, numbers(weak)))
    return out

