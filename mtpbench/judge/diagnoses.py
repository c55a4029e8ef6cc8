"""What a run says about itself, with no baseline: cell health (partial repeats, speculation off, a graph
mode the platform downgraded), patches that did not apply, cross-process instability (exact under greedy
decoding, a prompt-level permutation test when sampling), graph/compiled cells diverging from their eager
reference (paired by prompt, fail-closed: a gap the data cannot support is `inconclusive`), and text that
changed between the cells of a build. compare.analyze calls these; each returns structured findings.
Nothing here prints.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
import pandas as pd

from mtpbench.fixes.status import Unapplied, is_fix
from mtpbench.judge import serving_summary
from mtpbench.judge.evidence import SIG, CellResult, _dedupe, _pos_cols, changed_text
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
from mtpbench.judge.stats import Estimate, PromptCounts, gate_threshold, paired_diff, permutation_spread_pvalue
from mtpbench.schema import COUNTERS_ONLY
from mtpbench.specs import GateSpec
from mtpbench.store.manifest import ManifestConfig
from mtpbench.store.results import Run


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
    common = {
        "pos": pos,
        "spread": float(spreads[pos]),
        "prompts": n_prompts,
        "repeats": len(reps),
        "per_seed": {str(s): float(rates[j, pos]) for j, s in enumerate(seeds)},
    }
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
        payload = Instability(
            **common, method="exact", prompts_differing=len(names), differing=differing, same_text=same_text
        )
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


def _text_changes(cells: list[CellResult]) -> list[Finding]:
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


def _unapplied(u: Unapplied) -> Finding:
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


def sampler_broken(cell_starts: list[dict[str, Any]]) -> list[Finding]:
    """Cells whose sampled repeats ran on an expand kernel that leaves the per-token temperature unwritten
    (the worker's probe, recorded in cell_start for sampled jobs): their acceptance measures leftover
    memory, not the drafter (docs/cpu-sampling.md). A named bug of the build: it fails the gate."""
    by: dict[str, list[dict[str, Any]]] = {}
    for s in cell_starts:
        probe = s.get("sampled_expand")
        if isinstance(probe, dict) and probe.get("status") == "broken":
            by.setdefault(str(s.get("cell")), []).append(s)
    return [
        Finding(
            Kind.SAMPLER_BROKEN,
            Severity.FAIL,
            cell,
            Cause.CPU_EXPAND_KERNEL,
            SamplerBroken(
                hash_seeds=[s.get("hash_seed") for s in starts],
                detail=str(starts[0]["sampled_expand"].get("detail", "")),
            ),
        )
        for cell, starts in by.items()
    ]


def _cell_health(c: CellResult) -> list[Finding]:
    out: list[Finding] = []
    left_out = [r for r in c.repeats if not r.complete]
    if left_out:
        out.append(
            Finding(
                Kind.RUN_FAILED,
                Severity.FAIL,
                c.cell,
                Cause.INCOMPLETE_REPEATS,
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
    return out


Pair = tuple[CellResult, CellResult]


def _divergence_pairs(cfg: ManifestConfig, cells: list[CellResult], greedy: bool) -> list[Pair]:
    """(cell, its eager reference) for every graph/compiled cell of a greedy run."""
    ref_mode = _reference_mode(cfg, cells) if greedy else None
    if not ref_mode:
        return []
    refs = {(c.build, c.variant): c for c in cells if c.mode == ref_mode}
    return [
        (c, refs[(c.build, c.variant)])
        for c in cells
        if (c.build, c.variant) in refs and c is not refs[(c.build, c.variant)]
    ]


def _serving_diagnoses(run: Run, cells: list[CellResult]) -> list[Finding]:
    # Serving workload (mtpbench/judge/serving_summary.py): failed requests, /metrics vs per-request counts.
    return serving_summary.diagnoses(run, cells)
