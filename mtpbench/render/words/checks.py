"""The words of the gate's checks: regression, inconclusive, underpowered and improvement, for a cell's
acceptance length (LengthChecks) and its per-position rates (PositionChecks); an inconclusive graph divergence
(a Divergence payload) too. Also one check in words (`check_message`, `length_message`) for the JUnit testcases
and the CI annotations. Sentences only: the numbers are the judge's.
"""

from __future__ import annotations

from mtpbench.judge.checks import LengthCheck, PositionCheck
from mtpbench.judge.findings import Divergence, LengthChecks, PositionChecks
from mtpbench.judge.findings.builds import BuildDivergence
from mtpbench.judge.findings.context import ContextDecay
from mtpbench.judge.findings.features import ModeDivergence
from mtpbench.judge.findings.ksweep import KDependence
from mtpbench.judge.signals.serving_summary import COUNTERS_ONLY_METHOD
from mtpbench.render.words.context import msg_context_inconclusive
from mtpbench.render.words.units import ci_text, delta_ci, pct, pts
from mtpbench.schema import COUNTERS_ONLY

__all__ = [
    "COUNTERS_ONLY_TEXT",
    "check_message",
    "length_message",
    "msg_improvement",
    "msg_inconclusive",
    "msg_regression",
    "msg_underpowered",
]

# The method, and what it means for a verdict (compare._counters_only_check).
COUNTERS_ONLY_TEXT = (
    f"{COUNTERS_ONLY_METHOD} (the build returned no per-request counts): no interval, the point estimate decides"
)


def _positions(n: PositionChecks, with_ci: bool = True) -> str:
    parts = []
    for j, pos in enumerate(n.positions):
        s = f"pos{pos} {pct(n.run_rates[j])} % vs baseline {pct(n.base_rates[j])} % ({pts(n.deltas[j])} pts"
        if with_ci:
            s += f", {100 * n.confidence:g} % CI {delta_ci(n.cis[j])}"
        parts.append(s + ")")
    return "; ".join(parts)


def _mdes(n: PositionChecks) -> str:
    return ", ".join(
        f"pos{p} {'n/a' if m is None else f'{100 * m:.1f}'}" for p, m in zip(n.positions, n.mdes, strict=True)
    )


def _al(n: LengthChecks, with_ci: bool = True) -> str:
    run = "–" if n.run_al is None else f"{n.run_al:.3f}"
    base = "–" if n.base_al is None else f"{n.base_al:.3f}"
    delta = "–" if n.delta is None else f"{n.delta:+.3f}"
    s = f"acceptance length {run} vs baseline {base} tokens/step ({delta}"
    if with_ci and n.method != COUNTERS_ONLY:
        ci = "no interval (fewer than 2 prompts with drafts)" if n.ci is None else f"[{n.ci[0]:+.3f}, {n.ci[1]:+.3f}]"
        s += f", {100 * n.confidence:g} % CI {ci}"
    return s + ")"


def _al_tol(n: LengthChecks) -> str:
    return f"{n.tolerance_pct:g} % of the baseline's AL ({n.tolerance:.3f} tokens/step)"


def _al_mde(n: LengthChecks) -> str:
    return "n/a" if n.mde is None else f"{n.mde:.3f}"


def _al_role(n: LengthChecks) -> str:
    return "" if n.primary else " (a diagnosis: the gate certifies per position)"


def msg_regression(n: PositionChecks | LengthChecks) -> str:
    if isinstance(n, LengthChecks):
        tail = COUNTERS_ONLY_TEXT if n.method == COUNTERS_ONLY else f"{n.prompts} prompts"
        return f"{_al(n)}; tolerance {_al_tol(n)}, {tail}, entry {n.entry}{_al_role(n)}"
    if n.method == COUNTERS_ONLY:
        return (
            f"{_positions(n, with_ci=False)}; tolerance {n.tolerance_pts:g} pts, entry {n.entry}; {COUNTERS_ONLY_TEXT}"
        )
    return f"{_positions(n)}; tolerance {n.tolerance_pts:g} pts, {n.prompts} prompts, entry {n.entry}"


def msg_inconclusive(n: PositionChecks | LengthChecks | Divergence | ContextDecay | KDependence) -> str:
    if isinstance(n, ContextDecay):
        return msg_context_inconclusive(n)
    if isinstance(n, KDependence):
        return (
            f"pos0 at k={n.k} differs from k={n.reference_k} by {pts(n.delta)} pts, beyond the "
            f"{n.tolerance_pts or 0:g}-pt divergence tolerance, but the data cannot support it (CI "
            f"{delta_ci(n.ci)}, {n.prompts} prompts)"
        )
    if isinstance(n, Divergence):
        # A mode-divergence's inconclusive names the features the mode changes (judge/signals/features.py).
        changed = ", ".join(c.name for c in n.features) + ": " if isinstance(n, ModeDivergence) else ""
        # A build-divergence's inconclusive names the two builds (judge/signals/builds.py); its modes are the same.
        what = f"{changed}{n.mode} differs from {n.reference_mode}"
        if isinstance(n, BuildDivergence):
            what = f"build {n.build} differs from reference build {n.reference_build} in mode {n.mode}"
        return (
            f"{what} by {pts(n.delta)} pts at pos{n.pos}, beyond the "
            f"{n.tolerance_pts:g}-pt divergence tolerance, but the data cannot support it (CI "
            f"{delta_ci(n.ci)}, {n.prompts} prompts)"
        )
    if isinstance(n, LengthChecks):
        return (
            f"{_al(n)}: the data neither rule out a drop of {_al_tol(n)} nor confirm one ({n.prompts} "
            f"prompts; the smallest drop this run catches with {100 * n.power:g} % power: {_al_mde(n)} "
            "tokens/step)"
            f"{_al_role(n)}"
        )
    if n.check == "positions":
        return (
            f"{_positions(n)}: not certified per position (a drop of {n.tolerance_pts:g} pts is neither "
            f"ruled out nor confirmed; smallest drop caught with {100 * n.power:g} % power: {_mdes(n)} pts, "
            f"{n.prompts} prompts); a diagnosis, the gate certifies acceptance length"
        )
    return (
        f"{_positions(n)}: the data neither rule out a drop of {n.tolerance_pts:g} pts nor confirm one "
        f"({n.prompts} prompts; the smallest drop this run catches with {100 * n.power:g} % power: {_mdes(n)} pts)"
    )


def msg_underpowered(n: PositionChecks | LengthChecks) -> str:
    if isinstance(n, LengthChecks):
        if n.method == COUNTERS_ONLY:
            return (
                f"{_al(n, with_ci=False)}: within {_al_tol(n)}, but the power to detect a drop that large is "
                f"unknown; {COUNTERS_ONLY_TEXT}"
            )
        return (
            f"could not have caught a drop of {_al_tol(n)} with {100 * n.power:g} % power: smallest such "
            f"drop {_al_mde(n)} tokens/step ({n.prompts} prompts)"
        )
    if n.method == COUNTERS_ONLY:
        return (
            f"{_positions(n, with_ci=False)}: within the {n.tolerance_pts:g}-pt tolerance, but the power to "
            f"detect a drop that large is unknown; {COUNTERS_ONLY_TEXT}"
        )
    return (
        f"could not have caught a drop of {n.tolerance_pts:g} pts with {100 * n.power:g} % power: smallest such "
        f"drop {_mdes(n)} pts ({n.prompts} prompts)"
    )


def msg_improvement(n: PositionChecks | LengthChecks) -> str:
    if isinstance(n, LengthChecks):
        return f"{_al(n, with_ci=False)}: better than the baseline beyond {_al_tol(n)}"
    return f"{_positions(n, with_ci=False)}: better than the baseline beyond the {n.tolerance_pts:g}-pt tolerance"


def check_message(x: PositionCheck) -> str:
    """One cell × position check in words (JUnit, CI annotations)."""
    mde = "–" if x.mde is None else f"{100 * x.mde:.1f}"
    if x.method == COUNTERS_ONLY:
        return (
            f"pos{x.pos} {pct(x.run_rate)} % vs baseline {pct(x.base_rate)} % ({pts(x.delta)} pts; "
            f"{COUNTERS_ONLY_TEXT}): {x.verdict.value}"
        )
    return (
        f"pos{x.pos} {pct(x.run_rate)} % vs baseline {pct(x.base_rate)} % ({pts(x.delta)} pts, CI "
        f"{ci_text(x.ci) or 'none'}, MDE {mde} pts, {x.prompts} prompts): {x.verdict.value}"
    )


def length_message(x: LengthCheck) -> str:
    """One cell's acceptance-length check in words (JUnit)."""
    run = "–" if x.run_al is None else f"{x.run_al:.3f}"
    base = "–" if x.base_al is None else f"{x.base_al:.3f}"
    delta = "–" if x.delta is None else f"{x.delta:+.3f}"
    if x.method == COUNTERS_ONLY:
        return f"AL {run} vs baseline {base} tokens/step ({delta}; {COUNTERS_ONLY_TEXT}): {x.verdict.value}"
    ci = "none" if x.ci is None else f"[{x.ci.low:+.3f}, {x.ci.high:+.3f}]"
    mde = "–" if x.mde is None else f"{x.mde:.3f}"
    return (
        f"AL {run} vs baseline {base} tokens/step ({delta}, CI {ci}, MDE {mde}, tolerance {x.tolerance:.3f}, "
        f"{x.prompts} prompts): {x.verdict.value}"
    )
