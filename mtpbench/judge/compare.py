"""Pure verdicts: a run's cells against a baseline, against each other, and across their repeats.

`collect` turns a run's records into per-cell evidence with pandas/numpy column operations (no Python
loop over prompt records): repeats that did not finish, or recorded fewer prompts than the run asked for,
are kept for display but excluded from every verdict; identical repeats of a prompt (same counts, same
output sha256) count once; each prompt is one cluster of evidence (stats.py says why). `analyze` names
what needs no baseline — speculation off, partial repeats, cross-process instability (exact under greedy
decoding, a prompt-level permutation test when sampling), graph divergence, text changes; `compare` adds
the per-position gate against a baseline, fail-closed: a cell with no baseline entry is not comparable,
a baseline that cannot vouch for the model is refused unless named, a drop beyond the tolerance that the
data cannot support is `inconclusive`, never a pass.

Findings are structured (enums for verdict, severity, kind and cause; numbers); report.py words them.
The exit code comes from the findings through the one policy in errors.py. Nothing here prints.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mtpbench.config import GateSpec
from mtpbench.errors import ExitCode, NotComparableError, UserError, combine_exit_codes
from mtpbench.fixes.status import Unapplied, is_fix, unapplied
from mtpbench.judge import serving_summary
from mtpbench.judge.evidence import SIG, CellResult, RepeatResult, _dedupe, _pos_cols, changed_text, collect
from mtpbench.judge.findings import (
    FAIL,
    INFO,
    KIND_EXIT,
    WARN,
    Cause,
    Divergence,
    Downgraded,
    ExcludedRepeat,
    Finding,
    Instability,
    Kind,
    NoBaseline,
    PatchNotApplied,
    PositionChecks,
    RunFailed,
    Severity,
    SpeculationOff,
    TextChanged,
    Unchecked,
    Verdict,
)
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
    permutation_spread_pvalue,
    welch_df,
    wilson,
)
from mtpbench.schema import COUNTERS_ONLY
from mtpbench.store.baseline import Baseline, BaselineEntry, run_fingerprint
from mtpbench.store.results import ManifestConfig, Run

__all__ = [
    "FAIL", "INFO", "KIND_EXIT", "WARN", "Cause", "CellResult", "Comparison", "Finding", "Kind", "PositionCheck",
    "RepeatResult", "Severity", "Verdict", "analyze", "collect", "compare",
]  # fmt: skip



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
class Comparison:
    run_id: str
    cells: list[CellResult]
    checks: list[PositionCheck] = field(default_factory=list)
    diagnoses: list[Finding] = field(default_factory=list)
    baseline: str | None = None
    baseline_provenance: dict[str, Any] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)
    gate: GateSpec = field(default_factory=GateSpec)
    greedy: bool = True
    # The run's statistical checks (positions x cells against the baseline, graph divergence): its
    # false-alarm rate is split evenly among them (Bonferroni), so a harmless run fails at most that often.
    family: int = 1

    @property
    def findings(self) -> list[Finding]:
        return self.diagnoses

    @property
    def alpha(self) -> float:
        """One check's share of the run's false-alarm rate (one-sided)."""
        return self.gate.false_alarm / max(self.family, 1)

    @property
    def exit_code(self) -> ExitCode:
        return combine_exit_codes(f.exit_code for f in self.diagnoses)



# --- diagnoses without a baseline -------------------------------------------------------------------


def _reference_mode(cfg: ManifestConfig, cells: list[CellResult]) -> str | None:
    if cfg.reference_mode:
        return cfg.reference_mode
    for c in cells:
        if c.requested.get("enforce_eager") or c.requested.get("cudagraph_mode") == "NONE":
            return c.mode
    for name, spec in cfg.modes.items():
        if spec.get("enforce_eager") or spec.get("cudagraph_mode") == "NONE":
            return str(name)
    return None


def _common_rows(cell: CellResult) -> tuple[pd.DataFrame, list[int]]:
    """Observations of the prompts every complete repeat measured."""
    reps = [r.repeat for r in cell.used_repeats]
    obs = cell.observations
    if len(reps) < 2 or not len(obs):
        return obs.iloc[0:0], reps
    seen = obs.groupby("prompt").size()  # one row per prompt and repeat (_frame)
    return obs[obs["prompt"].isin(seen[seen == len(reps)].index)], reps


def _per_seed_rates(cell: CellResult, rows: pd.DataFrame, k: int) -> tuple[np.ndarray, list[Any]]:
    tot = rows.groupby("repeat", sort=True)[["num_drafts", *_pos_cols(k)]].sum()
    rates = tot[_pos_cols(k)].to_numpy(dtype=float) / np.maximum(tot[["num_drafts"]].to_numpy(dtype=float), 1)
    seeds = {r.repeat: r.hash_seed for r in cell.repeats}
    return rates, [seeds.get(int(r)) for r in tot.index]


def _instability(cell: CellResult, gate: GateSpec, greedy: bool) -> Finding | None:
    rows, reps = _common_rows(cell)
    k = cell.evidence.k
    if len(reps) < 2 or not len(rows) or int(rows["num_drafts"].sum()) == 0:
        return None
    rates, seeds = _per_seed_rates(cell, rows, k)
    spreads = rates.max(axis=0) - rates.min(axis=0)
    pos = int(np.argmax(spreads))
    n_prompts = int(rows["prompt"].nunique())
    common = {"pos": pos, "spread": float(spreads[pos]), "prompts": n_prompts, "repeats": len(reps),
              "per_seed": {str(s): float(rates[j, pos]) for j, s in enumerate(seeds)}}  # fmt: skip
    if greedy:
        # Deterministic decoding: repeats must agree exactly, prompt by prompt. No test needed.
        distinct = _dedupe(rows, [*SIG, *_pos_cols(k)]).groupby("prompt").size()
        codes = distinct[distinct > 1].index
        if not len(codes):
            return None
        names = cell.prompt_names[codes.to_numpy()]
        differing = heapq.nsmallest(10, map(str, names))  # the first ten are shown; all are counted
        texts = rows[rows["prompt"].isin(codes)].groupby("prompt")["sha"].nunique()
        same_text = bool((texts == 1).all())
        payload = Instability(**common, method="exact", prompts_differing=len(names), differing=differing,
                              same_text=same_text)  # fmt: skip
        fails = spreads[pos] > gate.instability_pts / 100
    else:
        piv = rows.pivot_table(index="prompt", columns="repeat", values=["num_drafts", *_pos_cols(k)], aggfunc="sum")
        best: tuple[float, int] | None = None
        for i in range(k):
            res = permutation_spread_pvalue(piv[f"a{i}"].to_numpy(), piv["num_drafts"].to_numpy())
            if res is not None and (best is None or res[1] < best[0]):
                best = (res[1], i)
        if best is None:
            return None
        p_adj = min(1.0, best[0] * k)  # Bonferroni over the k positions
        payload = Instability(**common, method="permutation", pvalue=p_adj, same_text=False)
        if p_adj >= 1 - gate.confidence:
            return None
        fails = spreads[pos] > gate.instability_pts / 100
    return Finding(
        Kind.INSTABILITY,
        Severity.FAIL if fails else Severity.WARN,
        cell.cell,
        Cause.ORDER_DEPENDENT_STATE if payload.same_text else Cause.TARGET_NONDETERMINISM,
        payload,
    )


def _paired(a: PromptCounts, b: PromptCounts, pos: int, confidence: float) -> tuple[Estimate, int]:
    return paired_diff(a.per_pos[:, pos], a.drafts, b.per_pos[:, pos], b.drafts, confidence), a.g


def _counters_only_divergence(cell: CellResult, ref: CellResult, gate: GateSpec) -> Finding | None:
    """One of the two cells counted only the server's /metrics deltas: one pooled count per cell-repeat, no
    prompts to pair, no interval. As against a baseline (_counters_only_check), the point estimate decides:
    a gap beyond the divergence tolerance is a divergence (exit 1). The paired rule would call it
    `inconclusive` over "1 prompt" (the seed's collapse between graph modes would never fail the gate), and
    a per-request cell against a counters-only one, which share no prompt id, would not be compared at all."""
    ta, tb = cell.evidence.total(), ref.evidence.total()
    k = min(len(ta.accepted_per_pos), len(tb.accepted_per_pos))
    if ta.num_drafts <= 0 or tb.num_drafts <= 0 or not k:
        return None
    rates = [(ta.accepted_per_pos[i] / ta.num_drafts, tb.accepted_per_pos[i] / tb.num_drafts) for i in range(k)]
    i = max(range(k), key=lambda j: abs(rates[j][0] - rates[j][1]))
    delta = rates[i][0] - rates[i][1]
    if abs(delta) <= gate.divergence_pts / 100:
        return None
    same_text = _same_outputs(cell, ref)
    payload = Divergence(
        pos=i, delta=delta, ci=None, prompts=0, method=COUNTERS_ONLY, reference=ref.cell, reference_mode=ref.mode,
        mode=cell.mode, run_rate=rates[i][0], reference_rate=rates[i][1],
        effective_cudagraph_mode=cell.effective.get("cudagraph_mode"), same_text=same_text,
        tolerance_pts=gate.divergence_pts,
    )  # fmt: skip
    cause = Cause.NONE if same_text is None else Cause.DRAFT_GRAPH_METADATA if same_text else Cause.TARGET_NUMERICS
    return Finding(Kind.GRAPH_DIVERGENCE, Severity.FAIL, cell.cell, cause, payload)


def _divergence(cell: CellResult, ref: CellResult, gate: GateSpec, alpha: float) -> Finding | None:
    """Graph/compiled mode vs eager at the same build and variant, paired by prompt. A divergence needs a gap
    beyond θ = max(t_{1−α}·se, δ − t_{power}·se) (δ = gate.divergence_pts), as a regression does; a gap beyond δ
    that the data cannot support is inconclusive; anything else is no finding (a diagnosis, not a pass)."""
    a, b = cell.evidence, ref.evidence
    if not a.g or not b.g or a.k != b.k:
        return None
    if cell.counters_only or ref.counters_only:
        return _counters_only_divergence(cell, ref, gate)
    worst: tuple[int, Estimate, int] | None = None
    unsupported: tuple[int, Estimate, int] | None = None
    a, b = a.align(b)  # the prompts both cells measured, once for all positions
    drop = gate.divergence_pts / 100
    for i in range(a.k):
        est, n = _paired(a, b, i, gate.confidence)
        if est.value is None:
            continue
        theta = None if est.se is None else gate_threshold(est.se, est.df, drop, alpha, gate.power)
        supported = theta is not None and abs(est.value) > theta
        if not supported and abs(est.value) <= drop:
            continue
        if supported and (worst is None or abs(est.value) > abs(worst[1].value or 0)):
            worst = (i, est, n)
        elif not supported and unsupported is None:
            unsupported = (i, est, n)
    chosen = worst or unsupported
    if chosen is None:
        return None
    i, est, n = chosen
    same_text = _same_outputs(cell, ref)
    payload = Divergence(
        pos=i, delta=est.value, ci=None if est.ci is None else [est.ci.low, est.ci.high], prompts=n,
        reference=ref.cell, reference_mode=ref.mode, mode=cell.mode, run_rate=cell.summary.per_pos[i],
        reference_rate=ref.summary.per_pos[i], effective_cudagraph_mode=cell.effective.get("cudagraph_mode"),
        same_text=same_text, tolerance_pts=gate.divergence_pts,
    )  # fmt: skip
    if worst is None:
        return Finding(Kind.INCONCLUSIVE, Severity.FAIL, cell.cell, Cause.TOO_LITTLE_EVIDENCE, payload)
    cause = Cause.NONE if same_text is None else Cause.DRAFT_GRAPH_METADATA if same_text else Cause.TARGET_NUMERICS
    return Finding(Kind.GRAPH_DIVERGENCE, Severity.FAIL, cell.cell, cause, payload)


def _same_outputs(a: CellResult, b: CellResult) -> bool | None:
    """Whether the two cells generated the same text on the prompts both measured; None: no prompt in
    common (a counters-only cell's one pooled record against per-request ones), nothing was compared."""
    sa = a.observations.drop_duplicates("prompt").set_index("prompt")["sha"]
    sb = b.observations.drop_duplicates("prompt").set_index("prompt")["sha"]
    common = sa.index.intersection(sb.index)
    if not len(common):
        return None
    return bool((sa.loc[common] == sb.loc[common]).all())


def _text_changes(cells: list[CellResult]) -> list[Finding]:
    """Greedy: the target verifies every token, so text must be the same in every cell of a build."""
    pairs = changed_text(cells)
    build_of = {c.cell: c.build for c in cells}
    out: list[Finding] = []
    for build in dict.fromkeys(c.build for c in cells):
        changed = sorted({p for cell, p in pairs if build_of[cell] == build})
        if changed:
            out.append(Finding(Kind.TEXT_CHANGED, Severity.WARN, f"{build}/*", Cause.TARGET_NUMERICS,
                               TextChanged(build=build, prompts=changed)))  # fmt: skip
    return out


def _unapplied(u: Unapplied) -> Finding:
    # A refusal is the patch working as designed (the build is not the one it targets, or is fixed already):
    # warn. A patch that raised is a broken measurement of the variant: fail the gate.
    raised = u.status == "failed"
    return Finding(
        Kind.FIX_NOT_APPLIED if is_fix(u.patch) else Kind.PATCH_NOT_APPLIED,
        Severity.FAIL if raised else Severity.WARN, u.cell, Cause.PATCH_RAISED if raised else Cause.PATCH_REFUSED,
        PatchNotApplied(patch=u.patch, variant=u.variant, status=u.status, repeats=u.repeats, of=u.of,
                        details=list(u.details)),
    )  # fmt: skip


def _cell_health(c: CellResult) -> list[Finding]:
    out: list[Finding] = []
    left_out = [r for r in c.repeats if not r.complete]
    if left_out:
        out.append(
            Finding(
                Kind.RUN_FAILED, Severity.FAIL, c.cell, Cause.INCOMPLETE_REPEATS,
                RunFailed(excluded=[ExcludedRepeat(r.repeat, r.hash_seed, r.status.value, r.prompts, c.prompts_expected)
                                    for r in left_out], used=len(c.used_repeats), repeats=len(c.repeats)),
            )
        )  # fmt: skip
    off = [r for r in c.used_repeats if r.counts.num_drafts == 0]
    if off:
        out.append(
            Finding(
                Kind.SPECULATION_OFF, Severity.FAIL, c.cell, Cause.SPECULATION_DISABLED,
                SpeculationOff(hash_seeds=[r.hash_seed for r in off], repeats=len(c.used_repeats),
                               all=len(off) == len(c.used_repeats), prompts=c.prompts_expected),
            )
        )  # fmt: skip
    if c.graph_downgraded:
        out.append(
            Finding(
                Kind.GRAPH_DOWNGRADED, Severity.WARN, c.cell, Cause.PLATFORM_DOWNGRADE,
                Downgraded(requested=c.requested.get("cudagraph_mode"), effective=c.effective.get("cudagraph_mode"),
                           device_type=c.effective.get("device_type")),
            )
        )  # fmt: skip
    return out


Measured = Callable[["Comparison"], None]


Pair = tuple[CellResult, CellResult]


def _divergence_pairs(cfg: ManifestConfig, cells: list[CellResult], greedy: bool) -> list[Pair]:
    """(cell, its eager reference) for every graph/compiled cell of a greedy run."""
    ref_mode = _reference_mode(cfg, cells) if greedy else None
    if not ref_mode:
        return []
    refs = {(c.build, c.variant): c for c in cells if c.mode == ref_mode}
    return [(c, refs[(c.build, c.variant)]) for c in cells
            if (c.build, c.variant) in refs and c is not refs[(c.build, c.variant)]]  # fmt: skip


def analyze(run: Run, gate: GateSpec | None = None, run_failed: bool = False, *,
            measured: Measured | None = None, baseline_checks: int = 0) -> Comparison:  # fmt: skip
    """The run's cells and their diagnoses. `measured(comp)` is called once the cells are known and before
    any diagnosis is made: it may read the cells (and the checks, under compare), nothing else. The report
    draws its figures in another process meanwhile; the diagnoses take as long again as collecting."""
    cfg = run.typed.config
    gate = gate or cfg.gate
    cells = collect(run, gate.confidence)
    greedy = cfg.sampling.temperature == 0.0
    pairs = _divergence_pairs(cfg, cells, greedy)
    comp = Comparison(run.run_id, cells, gate=gate, greedy=greedy,
                      family=baseline_checks + sum(c.evidence.k or run.typed.k for c, _ in pairs))  # fmt: skip
    if measured is not None:
        measured(comp)
    for c in cells:
        comp.diagnoses.extend(_cell_health(c))
    if run_failed and not any(d.kind == Kind.RUN_FAILED for d in comp.diagnoses):
        comp.diagnoses.append(Finding(Kind.RUN_FAILED, Severity.FAIL, "*", Cause.INCOMPLETE_REPEATS,
                                      RunFailed(excluded=[])))  # fmt: skip
    comp.diagnoses.extend(_serving_diagnoses(run))
    # A variant whose patch did not apply measured the unpatched code under its name (mtpbench.fixes.status).
    comp.diagnoses.extend(_unapplied(u) for u in unapplied(run.cell_starts()))
    for c in cells:
        d = _instability(c, gate, greedy)
        if d:
            comp.diagnoses.append(d)
    if not greedy:
        # Sampled runs legitimately differ between modes and in their text: only the tests above apply.
        return comp
    for c, ref in pairs:
        d = _divergence(c, ref, gate, comp.alpha)
        if d:
            comp.diagnoses.append(d)
    comp.diagnoses.extend(_text_changes(cells))
    return comp


def _serving_diagnoses(run: Run) -> list[Finding]:
    # Serving workload (mtpbench/judge/serving_summary.py): failed requests, /metrics vs per-request counts.
    return serving_summary.diagnoses(run)


# --- against a baseline -----------------------------------------------------------------------------

# Fingerprint fields that identify what was measured; a baseline that leaves one null cannot vouch for it.
IDENTITY_FIELDS = (
    "model_config_sha256", "drafter_config_sha256", "model_weights_sha256", "drafter_weights_sha256",
    "prompts_sha256",
)  # fmt: skip


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
        )  # fmt: skip
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
                             method=COUNTERS_ONLY, entry=label)  # fmt: skip
    run_rate = tot.accepted_per_pos[i] / tot.num_drafts
    bc = entry.counts
    pooled = bc is not None and bc.num_drafts > 0
    base_rate = bc.accepted_per_pos[i] / bc.num_drafts if bc is not None and pooled else entry.rates_pct[i] / 100
    delta = run_rate - base_rate
    verdict = Verdict.REGRESSION if delta < -tol else Verdict.IMPROVEMENT if delta > tol else Verdict.PASS
    return PositionCheck(c.cell, i, run_rate, base_rate, delta, None, verdict, None, underpowered=True, prompts=0,
                         method=COUNTERS_ONLY, entry=label)  # fmt: skip


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
    )  # fmt: skip


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
        )  # fmt: skip

    by = {v: [x for x in checks if x.verdict == v] for v in Verdict}
    if by[Verdict.REGRESSION]:
        out.append(Finding(Kind.REGRESSION, Severity.FAIL, c.cell, Cause.DRAFTER_ACCEPTANCE,
                           numbers(by[Verdict.REGRESSION])))  # fmt: skip
    if by[Verdict.INCONCLUSIVE]:
        out.append(Finding(Kind.INCONCLUSIVE, Severity.FAIL, c.cell, Cause.TOO_LITTLE_EVIDENCE,
                           numbers(by[Verdict.INCONCLUSIVE], "baseline")))  # fmt: skip
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


def compare(
    run: Run,
    baseline: Baseline,
    gate: GateSpec | None = None,
    baseline_name: str | None = None,
    *,
    baseline_path: str | Path | None = None,
    entry_map: dict[str, str] | None = None,
    allow_unmatched: bool = False,
    accept_unchecked: bool = False,
    run_failed: bool = False,
    measured: Measured | None = None,
) -> Comparison:
    """analyze, then each cell checked against its baseline entry. `measured` as in analyze, with the checks
    made: they depend on the cells and the baseline only, so they are made before the diagnoses, and their
    findings are added after them (the order the diagnoses have always had)."""
    name = baseline_name or baseline.name
    # Only entries of the run's workload (serving vs offline, same concurrency/max_tokens), else exit 4.
    baseline, serving_unchecked = serving_summary.select_baseline(run, baseline)
    unchecked = check_comparable(run, baseline, name)
    named = config_names_baseline(run, baseline, baseline_path if baseline_path is not None else baseline_name)
    if unchecked and not (accept_unchecked or named):
        raise NotComparableError(
            f"baseline {name} cannot check {', '.join(unchecked)} of run {run.run_id}: it may describe another "
            "model, drafter or prompt set. Use it only if the run's config names it as its baseline, or pass "
            "--accept-unchecked",
            run.run_id, name, [f"unchecked: {u}" for u in unchecked], unchecked,
        )  # fmt: skip
    late: list[Finding] = []  # the checks' findings, after analyze's own
    resolved: dict[str, BaselineEntry] = {}  # cell -> the entry that judged it (acceptance and throughput alike)

    def judge(comp: Comparison) -> None:
        comp.baseline = name
        comp.baseline_provenance = baseline.provenance.model_dump(exclude_none=True)
        # Workload fields a serving baseline did not record are listed, not refused: they do not decide what
        # was measured (model, drafter, prompts), only how fast.
        comp.unchecked = unchecked + serving_unchecked + serving_summary.throughput_unchecked(run, baseline)
        if comp.unchecked:
            identity = [u for u in comp.unchecked if u in IDENTITY_FIELDS or u.startswith("sampling.")]
            by = None if not identity else "config" if named else "flag"
            late.append(Finding(Kind.UNCHECKED, Severity.INFO, "*", Cause.UNVERIFIED_IDENTITY,
                                Unchecked(fields=comp.unchecked, identity=identity, accepted_by=by)))  # fmt: skip
        emap = dict(run.typed.config.baseline_entry)
        emap.update(entry_map or {})
        for c in comp.cells:
            entry, _rule = resolve_entry(baseline, c, emap, name)
            if entry is not None:
                resolved[c.cell] = entry
            if entry is None:
                comp.checks.extend(
                    PositionCheck(c.cell, i, c.summary.per_pos[i], None, None, None, Verdict.NO_BASELINE)
                    for i in range(c.evidence.k)
                )
                entries = [f"{e.build}/{e.mode}" for e in baseline.entries]
                sev = Severity.WARN if allow_unmatched else Severity.FAIL
                late.append(Finding(Kind.NO_BASELINE, sev, c.cell, Cause.NO_BASELINE_ENTRY,
                                    NoBaseline(build=c.build, mode=c.mode, baseline=name, entries=entries)))
                continue
            checks = [_position_check(c, i, entry, comp.gate, comp.alpha) for i in range(len(entry.rates_pct))]
            comp.checks.extend(checks)
            late.extend(_check_findings(c, checks, comp.gate))
        if measured is not None:
            measured(comp)

    # Every cell x position is one check against the baseline (a cell without an entry too: it fails anyway).
    n_checks = run.typed.k * len({c.cell for c in run.typed.cells})
    comp = analyze(run, gate, run_failed, measured=judge, baseline_checks=n_checks)
    comp.diagnoses.extend(late)
    comp.diagnoses.extend(serving_summary.throughput_diagnoses(run, resolved))
    return comp
