"""What a run says about itself, with no baseline: cell health (partial repeats, speculation off, a graph
mode or an engine feature the platform ran otherwise), patches that did not apply, cross-process instability
(exact under greedy decoding, a prompt-level permutation test when sampling), every other mode diverging from
the reference mode (paired by prompt, fail-closed: a gap the data cannot support is `inconclusive`; a graph or
compiled mode is `graph-divergence`, a mode that differs in an engine feature a `mode-divergence` naming it,
judge/signals/features.py), every build against the reference build (build-divergence, and prompt for prompt where
the reference build repeats itself exactly: exactness-lost, judge/signals/exactness.py), and text that changed
between the cells of a build. `diagnose` makes them all, in the
order they are shown; each returns structured findings.
Nothing here prints.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mtpbench.fixes.status import Unapplied, is_fix
from mtpbench.judge.evidence import SIG, CellMeta, CellResult, changed_text, dedupe, pos_cols
from mtpbench.judge.findings import (
    Cause,
    Divergence,
    Downgraded,
    ExcludedRepeat,
    Finding,
    Instability,
    Kind,
    PatchNotApplied,
    RunFailed,
    SamplerBroken,
    Severity,
    SpeculationOff,
    TextChanged,
)
from mtpbench.judge.plan import Plan
from mtpbench.judge.signals import serving_summary
from mtpbench.judge.signals.binding_readout import binding_findings, bindings_from
from mtpbench.judge.signals.builds import as_build_divergence
from mtpbench.judge.signals.concurrency import level_pairs
from mtpbench.judge.signals.context import context_decay
from mtpbench.judge.signals.drift import drift_findings
from mtpbench.judge.signals.exactness import build_exactness
from mtpbench.judge.signals.features import as_mode_divergence, feature_changes, ignored_features, is_feature_mode
from mtpbench.judge.signals.ksweep import as_k_dependence, first_position, reference_k_findings
from mtpbench.judge.signals.per_request import CellHistogram, cell_histograms, per_request_findings
from mtpbench.judge.signals.reference_comparison import ReferenceComparison, stored_reference
from mtpbench.judge.signals.replay_readout import replay_findings
from mtpbench.judge.stats import Estimate, PromptCounts, gate_threshold, paired_diff, permutation_spread_pvalue
from mtpbench.schema import COUNTERS_ONLY, CellStatus
from mtpbench.specs import GateSpec


def _common_rows(cell: CellResult) -> tuple[pd.DataFrame, list[int]]:
    """Observations of the prompts every complete repeat measured."""
    reps = [r.repeat for r in cell.used_repeats]
    obs = cell.observations
    if len(reps) < 2 or not len(obs):
        return obs.iloc[0:0], reps
    seen = obs.groupby("prompt").size()  # one row per prompt and repeat (_frame)
    return obs[obs["prompt"].isin(seen[seen == len(reps)].index)], reps


def _per_seed_rates(cell: CellResult, rows: pd.DataFrame, k: int) -> tuple[np.ndarray, list[Any]]:
    tot = rows.groupby("repeat", sort=True)[["num_drafts", *pos_cols(k)]].sum()
    rates = tot[pos_cols(k)].to_numpy(dtype=float) / np.maximum(tot[["num_drafts"]].to_numpy(dtype=float), 1)
    seeds = {r.repeat: r.hash_seed for r in cell.repeats}
    return rates, [seeds.get(int(r)) for r in tot.index]


def instability(cell: CellResult, gate: GateSpec, greedy: bool) -> Finding | None:
    rows, reps = _common_rows(cell)
    k = cell.evidence.k
    if len(reps) < 2 or not len(rows) or int(rows["num_drafts"].sum()) == 0:
        return None
    rates, seeds = _per_seed_rates(cell, rows, k)
    spreads = rates.max(axis=0) - rates.min(axis=0)
    pos = int(np.argmax(spreads))
    n_prompts = int(rows["prompt"].nunique())
    common = {
        "pos": pos,
        "spread": float(spreads[pos]),
        "prompts": n_prompts,
        "repeats": len(reps),
        "per_seed": {str(s): float(rates[j, pos]) for j, s in enumerate(seeds)},
    }
    if greedy:
        # Deterministic decoding: repeats must agree exactly, prompt by prompt. No test needed.
        distinct = dedupe(rows, [*SIG, *pos_cols(k)]).groupby("prompt").size()
        codes = distinct[distinct > 1].index
        if not len(codes):
            return None
        names = cell.prompt_names[codes.to_numpy()]
        differing = heapq.nsmallest(10, map(str, names))  # the first ten are shown; all are counted
        texts = rows[rows["prompt"].isin(codes)].groupby("prompt")["sha"].nunique()
        same_text = bool((texts == 1).all())
        payload = Instability(
            **common, method="exact", prompts_differing=len(names), differing=differing, same_text=same_text
        )
        fails = spreads[pos] > gate.instability_pts / 100
    else:
        piv = rows.pivot_table(index="prompt", columns="repeat", values=["num_drafts", *pos_cols(k)], aggfunc="sum")
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


def _toward(delta: float, direction: int) -> bool:
    """Whether a gap counts in the direction asked: 0 either way (graph and mode divergence), -1 a drop only,
    +1 a rise only (build divergence, judge/signals/builds.py, which fails a drop and tells a rise)."""
    return direction == 0 or delta * direction > 0


def _counters_onlydivergence(cell: CellResult, ref: CellResult, gate: GateSpec, direction: int = 0) -> Finding | None:
    """One of the two cells counted only the server's /metrics deltas: one pooled count per cell-repeat, no
    prompts to pair, no interval. As against a baseline (checks.py's counters-only check), the point estimate decides:
    a gap beyond the divergence tolerance is a divergence (exit 1). The paired rule would call it
    `inconclusive` over "1 prompt" (the seed's collapse between graph modes would never fail the gate), and
    a per-request cell against a counters-only one, which share no prompt id, would not be compared at all."""
    ta, tb = cell.evidence.total(), ref.evidence.total()
    k = min(len(ta.accepted_per_pos), len(tb.accepted_per_pos))
    if ta.num_drafts <= 0 or tb.num_drafts <= 0 or not k:
        return None
    rates = [(ta.accepted_per_pos[i] / ta.num_drafts, tb.accepted_per_pos[i] / tb.num_drafts) for i in range(k)]
    i = max(
        range(k), key=lambda j: abs(rates[j][0] - rates[j][1]) if _toward(rates[j][0] - rates[j][1], direction) else -1
    )
    delta = rates[i][0] - rates[i][1]
    if abs(delta) <= gate.divergence_pts / 100 or not _toward(delta, direction):
        return None
    same_text = _same_outputs(cell, ref)
    payload = Divergence(
        pos=i,
        delta=delta,
        ci=None,
        prompts=0,
        method=COUNTERS_ONLY,
        reference=ref.cell,
        reference_mode=ref.mode,
        mode=cell.mode,
        run_rate=rates[i][0],
        reference_rate=rates[i][1],
        effective_cudagraph_mode=cell.effective.get("cudagraph_mode"),
        same_text=same_text,
        tolerance_pts=gate.divergence_pts,
    )
    cause = Cause.NONE if same_text is None else Cause.DRAFT_GRAPH_METADATA if same_text else Cause.TARGET_NUMERICS
    return Finding(Kind.GRAPH_DIVERGENCE, Severity.FAIL, cell.cell, cause, payload)


def divergence(cell: CellResult, ref: CellResult, gate: GateSpec, alpha: float, direction: int = 0) -> Finding | None:
    """Graph/compiled mode vs eager at the same build and variant, paired by prompt. A divergence needs a gap
    beyond θ = max(t_{1−α}·se, δ − t_{power}·se) (δ = gate.divergence_pts), as a regression does; a gap beyond δ
    that the data cannot support is inconclusive; anything else is no finding (a diagnosis, not a pass).
    `direction` -1 or +1 weighs only drops or only rises (`_toward`); build divergence asks for each apart."""
    a, b = cell.evidence, ref.evidence
    if not a.g or not b.g or a.k != b.k:
        return None
    if cell.counters_only or ref.counters_only:
        return _counters_onlydivergence(cell, ref, gate, direction)
    worst: tuple[int, Estimate, int] | None = None
    unsupported: tuple[int, Estimate, int] | None = None
    a, b = a.align(b)  # the prompts both cells measured, once for all positions
    drop = gate.divergence_pts / 100
    for i in range(a.k):
        est, n = _paired(a, b, i, gate.confidence)
        if est.value is None or not _toward(est.value, direction):
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
        pos=i,
        delta=est.value,
        ci=None if est.ci is None else [est.ci.low, est.ci.high],
        prompts=n,
        reference=ref.cell,
        reference_mode=ref.mode,
        mode=cell.mode,
        run_rate=cell.summary.per_pos[i],
        reference_rate=ref.summary.per_pos[i],
        effective_cudagraph_mode=cell.effective.get("cudagraph_mode"),
        same_text=same_text,
        tolerance_pts=gate.divergence_pts,
    )
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


def text_changes(cells: list[CellResult]) -> list[Finding]:
    """Greedy: the target verifies every token, so text must be the same in every cell of a build."""
    pairs = changed_text(cells)
    build_of = {c.cell: c.build for c in cells}
    out: list[Finding] = []
    for build in dict.fromkeys(c.build for c in cells):
        changed = sorted({p for cell, p in pairs if build_of[cell] == build})
        if changed:
            out.append(
                Finding(
                    Kind.TEXT_CHANGED,
                    Severity.WARN,
                    f"{build}/*",
                    Cause.TARGET_NUMERICS,
                    TextChanged(build=build, prompts=changed),
                )
            )
    return out


def unapplied_finding(u: Unapplied) -> Finding:
    # A refusal is the patch working as designed (the build is not the one it targets, or is fixed already):
    # warn. A patch that raised is a broken measurement of the variant: fail the gate.
    raised = u.status == "failed"
    return Finding(
        Kind.FIX_NOT_APPLIED if is_fix(u.patch) else Kind.PATCH_NOT_APPLIED,
        Severity.FAIL if raised else Severity.WARN,
        u.cell,
        Cause.PATCH_RAISED if raised else Cause.PATCH_REFUSED,
        PatchNotApplied(
            patch=u.patch, variant=u.variant, status=u.status, repeats=u.repeats, of=u.of, details=list(u.details)
        ),
    )


def sampler_broken(meta: Iterable[CellMeta]) -> list[Finding]:
    """Cells whose sampled repeats ran on an expand kernel that leaves the per-token temperature unwritten
    (the worker's probe, recorded in cell_start for sampled jobs): their acceptance measures leftover
    memory, not the drafter (docs/cpu-sampling.md). A named bug of the build: it fails the gate."""
    by: dict[str, list[CellMeta]] = {}
    for m in meta:
        if m.sampled_expand is not None and m.sampled_expand.get("status") == "broken":
            by.setdefault(m.cell, []).append(m)
    return [
        Finding(
            Kind.SAMPLER_BROKEN,
            Severity.FAIL,
            cell,
            Cause.CPU_EXPAND_KERNEL,
            SamplerBroken(
                hash_seeds=[m.hash_seed for m in broken],
                detail=str((broken[0].sampled_expand or {}).get("detail", "")),
            ),
        )
        for cell, broken in by.items()
    ]


def cell_health(c: CellResult) -> list[Finding]:
    out: list[Finding] = []
    left_out = [r for r in c.repeats if not r.complete]
    if left_out:
        # Every repeat left out finished by the manifest's word: the records file lost their prompts, no engine.
        short = all(r.status == CellStatus.OK for r in left_out)
        out.append(
            Finding(
                Kind.RUN_FAILED,
                Severity.FAIL,
                c.cell,
                Cause.RECORDS_SHORT if short else Cause.INCOMPLETE_REPEATS,
                RunFailed(
                    excluded=[
                        ExcludedRepeat(r.repeat, r.hash_seed, r.status.value, r.prompts, c.prompts_expected)
                        for r in left_out
                    ],
                    used=len(c.used_repeats),
                    repeats=len(c.repeats),
                ),
            )
        )
    off = [r for r in c.used_repeats if r.counts.num_drafts == 0]
    if off:
        out.append(
            Finding(
                Kind.SPECULATION_OFF,
                Severity.FAIL,
                c.cell,
                Cause.SPECULATION_DISABLED,
                SpeculationOff(
                    hash_seeds=[r.hash_seed for r in off],
                    repeats=len(c.used_repeats),
                    all=len(off) == len(c.used_repeats),
                    prompts=c.prompts_expected,
                ),
            )
        )
    if c.graph_downgraded:
        out.append(
            Finding(
                Kind.GRAPH_DOWNGRADED,
                Severity.WARN,
                c.cell,
                Cause.PLATFORM_DOWNGRADE,
                Downgraded(
                    requested=c.requested.get("cudagraph_mode"),
                    effective=c.effective.get("cudagraph_mode"),
                    device_type=c.effective.get("device_type"),
                ),
            )
        )
    # Engine features read back as cudagraph_mode is above: one the platform ignored is a warning.
    ignored = ignored_features(c)
    if ignored:
        out.append(ignored)
    return out


@dataclass
class Diagnosed:
    """What the run says about itself, with no baseline: its findings in the order they are shown, and per
    probed cell the metadata-binding probe's layer × group table (judge/signals/binding_readout.py `document`)."""

    findings: list[Finding] = field(default_factory=list)
    binding: dict[str, Any] = field(default_factory=dict)
    # The run held against its stored reference (judge/signals/reference_comparison.py), for the tables beside the
    # findings.
    reference: ReferenceComparison | None = None
    # Per cell, its requests in vLLM's per-request shape (judge/signals/per_request.py), for the histogram table.
    per_request: list[CellHistogram] = field(default_factory=list)


def diagnose(plan: Plan, run_failed: bool = False) -> Diagnosed:
    """Every diagnosis of the run, in the order they have always been shown."""
    cells, gate, greedy = plan.cells, plan.gate, plan.greedy
    out = Diagnosed()
    for c in cells:
        out.findings.extend(cell_health(c))
    if run_failed and not any(d.kind == Kind.RUN_FAILED for d in out.findings):
        out.findings.append(
            Finding(Kind.RUN_FAILED, Severity.FAIL, "*", Cause.INCOMPLETE_REPEATS, RunFailed(excluded=[]))
        )
    # Serving workload (judge/signals/serving_summary.py): failed requests, /metrics vs per-request counts.
    out.findings.extend(serving_summary.diagnoses(plan.run, plan.served))
    # A variant whose patch did not apply measured the unpatched code under its name (mtpbench.fixes.status).
    out.findings.extend(unapplied_finding(u) for u in plan.evidence.unapplied)
    out.findings.extend(sampler_broken(plan.evidence.meta))
    out.findings.extend(_probes(plan, out))
    for c in cells:
        d = instability(c, gate, greedy)
        if d:
            out.findings.append(d)
    # Per request, with no baseline: a collapse, or every draft accepted at every step (judge/signals/per_request.py).
    out.per_request = cell_histograms(plan.run, cells)
    out.findings.extend(per_request_findings(out.per_request))
    # Soak cells: drift between the rounds of one engine, rounds that accepted nothing, stalls (judge/signals/drift.py).
    # Their own family: each soak cell gets an even share of the false-alarm rate.
    soak = [c for c in cells if c.rounds is not None or c.round_ends]
    for c in soak:
        out.findings.extend(drift_findings(c, gate, greedy, gate.false_alarm / len(soak)))
    # A run replayed from the weights (`mtpbench reference`) is held against its stored reference too; its own
    # family (judge/signals/reference_comparison.py splits the false-alarm rate over its checks). None for a run never
    # replayed.
    out.reference = stored_reference(plan.evidence, gate)
    if out.reference is not None:
        out.findings.extend(out.reference.findings)
        # A k sweep: a cell below the weights at its k where another k of its cells is not (judge/signals/ksweep.py).
        held = [a.cell for a in out.reference.cells]
        out.findings.extend(reference_k_findings(cells, held, out.reference.findings))
    # Every build against the reference build, sampled runs too: prompts pair across builds as they do against
    # a baseline, and a release that accepts less is what a release sweep is run to catch (judge/signals/builds.py).
    divergent = build_divergences(plan)
    out.findings.extend(divergent)
    if greedy:
        # Prompt for prompt, where the reference build repeated itself exactly (judge/signals/exactness.py): a cell held
        # against the weights was judged there, one whose drop build-divergence names is not told twice.
        held = set() if out.reference is None else {a.cell for a in out.reference.cells}
        named = {f.cell for f in divergent if f.kind == Kind.BUILD_DIVERGENCE and f.severity == Severity.FAIL}
        out.findings.extend(build_exactness(plan.build_pairs, gate.tolerance_al_pct, held | named))
    if not greedy:
        # Sampled runs legitimately differ between modes and in their text: only the tests above apply.
        return out
    out.findings.extend(_greedy_divergences(plan, out.reference))
    out.findings.extend(text_changes(cells))
    return out


def _greedy_divergences(plan: Plan, reference: ReferenceComparison | None) -> list[Finding]:
    """A greedy run's pairs held by divergence's rule: each graph cell against its eager reference (a feature
    mode named as the feature), each k of a sweep against the smallest k, each serving level against the first,
    each longer context bucket against the first."""
    gate = plan.gate
    found: list[Finding] = []
    modes = plan.run.typed.config.modes
    for c, ref in plan.pairs:
        d = divergence(c, ref, gate, plan.alpha)
        if d:
            # A mode that differs from the reference in an engine feature, not only in graphs: the same rule's
            # finding, named after the features (judge/signals/features.py).
            changes = feature_changes(modes, c, ref)
            found.append(as_mode_divergence(d, changes) if is_feature_mode(changes) else d)
    # A k sweep: pos0 of every k against the smallest k's, by the same rule (judge/signals/ksweep.py), unless
    # both cells were held against the weights, each at its own k: the reference says exactly whether a k
    # departs (diagnose: reference_k_findings), where pos0 also moves with the starts k makes a request meet. The
    # family keeps the planned check: conservative.
    replayed = set() if reference is None else {a.cell for a in reference.cells}
    for c, ref in plan.k_pairs:
        if c.cell in replayed and ref.cell in replayed:
            continue
        d = divergence(first_position(c), first_position(ref), gate, plan.alpha)
        if d:
            found.append(as_k_dependence(d, c, ref))
    # A serving concurrency sweep: each level against the first, by the same rule, named as the feature it is.
    for level, first, change in level_pairs(plan.run, plan.cells, gate.confidence):
        d = divergence(level, first, gate, plan.alpha)
        if d:
            found.append(as_mode_divergence(d, [change]))
    # A context sweep: every longer bucket against the first, paired by prompt (judge/signals/context.py).
    on_decay = ((plan.run.typed.config.workload or {}).get("context") or {}).get("on_decay", "fail")
    for c in plan.cells:
        d = context_decay(c, gate, plan.alpha, on_decay)
        if d:
            found.append(d)
    return found


def build_divergences(plan: Plan) -> list[Finding]:
    """Each build pair by divergence's rule, a drop first (it fails); without one, a supported rise (told)."""
    out: list[Finding] = []
    for c, ref in plan.build_pairs:
        below = divergence(c, ref, plan.gate, plan.alpha, direction=-1)
        if below is not None:
            out.append(as_build_divergence(below, c, ref, plan.greedy, drop=True))
            continue
        above = divergence(c, ref, plan.gate, plan.alpha, direction=1)
        if above is not None and above.kind != Kind.INCONCLUSIVE:
            out.append(as_build_divergence(above, c, ref, plan.greedy, drop=False))
    return out


def _probes(plan: Plan, out: Diagnosed) -> list[Finding]:
    """Which KV-cache group each draft layer read, where the variant asked for the probe
    (judge/signals/binding_readout.py),
    and whether the draft replayed its graphs (judge/signals/replay_readout.py)."""
    bindings = bindings_from(plan.evidence.meta)
    out.binding = {c: b.document() for c, b in bindings.items() if b.repeats or b.missing}
    return [*binding_findings(bindings), *replay_findings(plan.cells, plan.evidence.meta)]
