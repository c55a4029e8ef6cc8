"""A cell against a baseline's upstream golden, judged as the upstream test judges, beside mtpbench's verdict.

The numbers come from the evidence stage's per-prompt counts (evidence.CellResult.evidence: identical greedy
repeats counted once), never from records. Both definitions are computed from them:
- pooled (vLLM's counters summed): AL = 1 + Σaccepted / Σdrafts, rate_i = Σaccepted_per_pos[i] / Σdrafts
  (AL is 1 and every rate 0 without drafts, as extract_acceptance_metrics returns);
- per-request mean: the mean over prompts of 1 + accepted / drafts, a prompt with no drafts counting as 1
  (tests/v1/e2e/spec_decode/utils.py compute_acceptance_len, averaged in acceptance_rates/utils.py);
and the conditional rates rate_i / rate_{i−1}.

The rule is applied exactly as written upstream (store/upstream.py names each part and its source line), so
a pass here is the pass the upstream CI would give on these counts. mtpbench's statistical verdict stands
beside it: for a golden with per-position rates it is the gate's verdict for the cell (its primary endpoint,
checks.py); for a per-request-mean AL golden, whose baseline has no rates, it is the gate's rule applied to
the per-prompt ALs (the prompt is the unit of evidence) against the golden, δ = gate.tolerance_al_pct % of
it. Where the two verdicts differ the finding says so.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from mtpbench.judge.checks import LengthCheck, PositionCheck, decide
from mtpbench.judge.evidence import CellResult
from mtpbench.judge.findings import OMIT_NONE, Cause, Finding, Kind, Payload, Severity, Verdict
from mtpbench.judge.stats import PromptCounts, lower_bound
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import Baseline
from mtpbench.store.upstream import UpstreamGolden

# Worst first: the verdict a cell's per-position checks add up to.
_ORDER = (Verdict.NO_DATA, Verdict.REGRESSION, Verdict.INCONCLUSIVE, Verdict.PASS, Verdict.IMPROVEMENT)


@dataclass(frozen=True, kw_only=True)
class UpstreamCheck(Payload):
    """A cell measured in an upstream golden's definition, its rule applied as upstream does, beside mtpbench's
    statistical verdict (the per-position gate's worst verdict, or the per-request AL check's)."""

    source: str  # repository file@commit
    definition: str  # pooled | per-request-mean
    al: float | None
    golden_al: float | None
    al_limits: list[float | None] | None  # [low, high] the rule allows (None: that side is open)
    per_pos: list[float]  # pooled unconditional rates (fractions)
    conditional: list[float | None]  # rate_i / rate_{i-1}
    golden_per_pos: list[float] | None
    pos_minimums: list[float | None] | None  # per position, what the rule requires (None: not checked)
    failed: list[str]  # the rule parts that fail: "al", "pos0", ...
    upstream: str  # pass | fail | no-data
    statistical: str  # a Verdict value
    disagree: bool
    prompts: int
    al_ci: list[float] | None = field(default=None, metadata=OMIT_NONE)  # per-request mean AL, one-sided bound


@dataclass(frozen=True)
class Measured:
    pooled_al: float
    request_mean_al: float | None  # None without prompts
    per_pos: list[float]
    conditional: list[float | None]
    request_als: np.ndarray  # one per prompt
    drafts: int
    prompts: int


def measure(ev: PromptCounts) -> Measured:
    """Both definitions from per-prompt counts."""
    drafts = int(ev.drafts.sum())
    k = ev.k
    per_pos = [float(ev.per_pos[:, i].sum()) / drafts if drafts > 0 else 0.0 for i in range(k)]
    cond = [per_pos[0] if k else None] + [b / a if a > 0 else None for a, b in itertools.pairwise(per_pos)]
    pooled = 1.0 + float(ev.accepted.sum()) / drafts if drafts > 0 else 1.0
    d = ev.drafts.astype(float)
    als = 1.0 + np.divide(ev.accepted.astype(float), d, out=np.zeros_like(d), where=d > 0)
    return Measured(pooled, float(als.mean()) if ev.g else None, per_pos, cond[:k], als, drafts, ev.g)


def apply_rule(
    up: UpstreamGolden, al: float | None, per_pos: list[float]
) -> tuple[list[str], list[float | None] | None, list[float | None] | None]:
    """The failing rule parts, the AL's allowed [low, high] and each position's minimum, as upstream asserts."""
    r, failed = up.rule, []
    limits: list[float | None] | None = None
    if up.al is not None and (r.al_rtol is not None or r.al_floor is not None):
        g = up.al
        low: float | None = None
        high: float | None = None
        ok = al is not None
        if r.al_rtol is not None:  # test_acceptance_length.py: abs(actual - expected) / expected <= DEFAULT_RTOL
            low, high = g * (1 - r.al_rtol), g * (1 + r.al_rtol)
            ok = ok and abs(al - g) / g <= r.al_rtol  # type: ignore[operator]
        if r.al_floor is not None:  # acceptance_rates/utils.py: mean >= expected_len * 0.95
            low = max(low or 0.0, g * r.al_floor)
            ok = ok and al >= g * r.al_floor  # type: ignore[operator]
        limits = [low, high]
        if not ok:
            failed.append("al")
    minimums: list[float | None] | None = None
    if up.per_pos and (r.pos_rtol is not None or r.pos_margin is not None):
        minimums = []
        for i, (a, g) in enumerate(zip(per_pos, up.per_pos, strict=True)):
            ok, need = True, None
            if r.pos_rtol is not None and g > 0:  # if exp > 0: actual >= exp * (1 - rtol)
                need = g * (1 - r.pos_rtol)
                ok = a >= need
            if r.pos_margin is not None:  # vllm-ascend: (a >= b) or (b - a < margin)
                need = g - r.pos_margin if need is None else max(need, g - r.pos_margin)
                ok = ok and (a >= g or g - a < r.pos_margin)
            minimums.append(need)
            if not ok:
                failed.append(f"pos{i}")
    return failed, limits, minimums


def _request_al_check(
    m: Measured, up: UpstreamGolden, gate: GateSpec, alpha: float, cert_alpha: float
) -> tuple[Verdict, list[float] | None]:
    """mtpbench's verdict on a per-request-mean AL golden: the per-prompt ALs' mean against the golden by the
    gate's own rule (checks.decide, δ = gate.tolerance_al_pct % of the golden: the primary endpoint's δ)."""
    if up.al is None or m.request_mean_al is None or m.drafts == 0:
        return Verdict.NO_DATA, None
    n = m.prompts
    if n < 2:
        return Verdict.INCONCLUSIVE, None
    se = float(np.std(m.request_als, ddof=1)) / math.sqrt(n)
    delta, drop, df = m.request_mean_al - up.al, gate.tolerance_al_pct / 100 * up.al, float(n - 1)
    if se == 0.0:  # every prompt the same AL: the mean is exact
        verdict = Verdict.REGRESSION if delta < -drop else Verdict.IMPROVEMENT if delta > drop else Verdict.PASS
        return verdict, [m.request_mean_al, m.request_mean_al]
    return decide(delta, se, df, drop, gate, alpha, cert_alpha), [
        up.al + lower_bound(delta, se, df, cert_alpha),
        m.request_mean_al,
    ]


def _worst(verdicts: list[Verdict]) -> Verdict:
    return min(verdicts, key=_ORDER.index) if verdicts else Verdict.NO_DATA


def _statistical(checks: list[PositionCheck], length: LengthCheck | None, gate: GateSpec) -> Verdict:
    """The gate's own verdict for the cell: its primary endpoint (the AL check, or the positions), with a
    significant position drop counted even when positions are diagnoses (it fails the gate too)."""
    if gate.primary == "acceptance_length" and length is not None:
        return _worst([length.verdict, *(x.verdict for x in checks if x.verdict == Verdict.REGRESSION)])
    return _worst([x.verdict for x in checks])


def findings(
    c: CellResult,
    baseline: Baseline,
    checks: list[PositionCheck],
    length: LengthCheck | None,
    gate: GateSpec,
    alpha: float,
    cert_alpha: float,
) -> list[Finding]:
    """The upstream finding of one cell (none when the baseline has no upstream golden), and for a golden
    without per-position rates mtpbench's own verdict on the per-request AL as a finding that can fail."""
    up = baseline.upstream
    if up is None:
        return []
    rated = bool(checks) or length is not None
    m = measure(c.evidence)
    al = m.pooled_al if up.definition == "pooled" else m.request_mean_al
    failed, limits, minimums = apply_rule(up, al, m.per_pos)
    no_data = m.prompts == 0 or (up.definition == "pooled" and m.drafts == 0)
    upstream_verdict = "no-data" if no_data else "fail" if failed else "pass"
    ci = None
    if rated:
        stat = _statistical(checks, length, gate)
    else:
        stat, ci = _request_al_check(m, up, gate, alpha, cert_alpha)
    stat_ok = stat in (Verdict.PASS, Verdict.IMPROVEMENT)
    payload = UpstreamCheck(
        source=f"{up.source.repository} {up.source.file}"
        + (f"@{up.source.commit[:8]}" if up.source.commit else f" ({up.source.pull_request})"),
        definition=up.definition,
        al=al,
        golden_al=up.al,
        al_limits=limits,
        per_pos=m.per_pos,
        conditional=m.conditional,
        golden_per_pos=up.per_pos,
        pos_minimums=minimums,
        failed=failed,
        upstream=upstream_verdict,
        statistical=stat.value,
        disagree=(upstream_verdict == "pass") != stat_ok,
        prompts=m.prompts,
        al_ci=ci,
    )
    severity = Severity.FAIL if upstream_verdict != "pass" else Severity.WARN if payload.disagree else Severity.INFO
    out = [Finding(Kind.UPSTREAM_RULE, severity, c.cell, Cause.UPSTREAM_TOLERANCE, payload)]
    if not rated and stat in (Verdict.REGRESSION, Verdict.NO_DATA):
        out.append(Finding(Kind.REQUEST_AL_REGRESSION, Severity.FAIL, c.cell, Cause.DRAFTER_ACCEPTANCE, payload))
    elif not rated and stat == Verdict.INCONCLUSIVE:
        out.append(Finding(Kind.REQUEST_AL_INCONCLUSIVE, Severity.FAIL, c.cell, Cause.TOO_LITTLE_EVIDENCE, payload))
    return out
