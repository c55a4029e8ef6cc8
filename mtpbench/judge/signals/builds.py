"""Builds side by side (issue 28): every build of a run held against its reference build (`reference_build`,
default the first build the run lists) at the same mode and variant, as every mode is held against the
reference mode at the same build. The rule is diagnoses.divergence's, the paired one graph and mode divergence
use (greedy: each prompt's exact counts against the same prompt's; sampled: the prompts' rates, paired), asked
once for a drop and once for a rise; this module pairs the cells (`build_pairs`) and retells the rule's
finding as a `build-divergence` naming both builds and the prompts that moved (`as_build_divergence`).
Nothing here prints.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mtpbench.judge.evidence import CellResult
from mtpbench.judge.figdata import BuildsView
from mtpbench.judge.findings import Cause, Divergence, Finding, Kind, Severity
from mtpbench.judge.findings.builds import BuildDivergence
from mtpbench.store.manifest import ManifestConfig

Pair = tuple[CellResult, CellResult]  # a cell of another build and the reference build's cell of its mode/variant

# How many differing prompts a finding names (all are counted), as cross-process instability names ten.
NAMED_PROMPTS = 10


def reference_build(cfg: ManifestConfig, cells: list[CellResult]) -> str | None:
    """The build the others are held against: the config's `reference_build` when the run has its cells,
    else the first build the run lists; None for a run of one build (nothing to hold against)."""
    builds = list(dict.fromkeys(c.build for c in cells))
    if len(builds) < 2:
        return None
    if cfg.reference_build in builds:
        return cfg.reference_build
    return builds[0]


def build_pairs(cfg: ManifestConfig, cells: list[CellResult]) -> list[Pair]:
    """(cell, the reference build's cell of the same mode and variant) for every cell of another build."""
    ref = reference_build(cfg, cells)
    if ref is None:
        return []
    refs = {(c.mode, c.variant): c for c in cells if c.build == ref}
    return [(c, refs[(c.mode, c.variant)]) for c in cells if c.build != ref and (c.mode, c.variant) in refs]


def differing_prompts(cell: CellResult, ref: CellResult, pos: int, drop: bool) -> list[str]:
    """The prompts both builds measured whose acceptance at `pos` differs, the largest move in the finding's
    direction first (a drop: the most negative Δ first), ties by prompt id."""
    a, b = cell.evidence.align(ref.evidence)
    if not a.g or pos >= a.k or pos >= b.k:
        return []
    rate_a = a.per_pos[:, pos] / np.maximum(a.drafts, 1)
    rate_b = b.per_pos[:, pos] / np.maximum(b.drafts, 1)
    moved = rate_a - rate_b
    order = sorted(
        (i for i in range(a.g) if moved[i] != 0 or a.drafts[i] != b.drafts[i]),
        key=lambda i: (float(moved[i]) if drop else -float(moved[i]), a.ids[i]),
    )
    return [a.ids[i] for i in order]


def as_build_divergence(finding: Finding, cell: CellResult, ref: CellResult, greedy: bool, drop: bool) -> Finding:
    """diagnoses.divergence's finding (graph-divergence or inconclusive) of a build pair, retold: the kind is
    build-divergence, failing for a drop and a warning for a rise (the build accepts more than the one it is
    held against: worth telling, not a regression of it); an inconclusive drop stays inconclusive."""
    payload = finding.payload
    if not isinstance(payload, Divergence):
        return finding
    fields = {f.name: getattr(payload, f.name) for f in dataclasses.fields(payload) if f.name != "check"}
    moved = differing_prompts(cell, ref, payload.pos, drop)
    extra = {
        "build": cell.build,
        "reference_build": ref.build,
        "prompts_differing": len(moved),
        "differing": moved[:NAMED_PROMPTS],
    }
    numbers = BuildDivergence(**fields, **extra)
    if finding.kind == Kind.INCONCLUSIVE:
        return Finding(Kind.INCONCLUSIVE, finding.severity, finding.cell, finding.cause, numbers)
    # Same text with other acceptance: the build's draft path; other text: the target's numerics changed with
    # the build. Sampled text differs by chance, so it names no cause.
    cause = Cause.NONE
    if greedy and payload.same_text is not None:
        cause = Cause.BUILD_CHANGE if payload.same_text else Cause.TARGET_NUMERICS
    return Finding(Kind.BUILD_DIVERGENCE, Severity.FAIL if drop else Severity.WARN, finding.cell, cause, numbers)


def _rate_gap(rate: float | None, ref: float | None) -> float | None:
    return None if rate is None or ref is None else rate - ref


def builds_table(cfg: ManifestConfig, cells: list[CellResult], findings: list[Finding]) -> BuildsView | None:
    """The builds × positions table of a run of several builds (None for one build): per mode/variant and
    build, each position's pooled acceptance, its gap to the reference build, the AL and the cell's
    build-divergence finding (from `findings`: "" none, "fail", "warn", "inconclusive")."""
    ref = reference_build(cfg, cells)
    if ref is None:
        return None
    builds = list(dict.fromkeys(c.build for c in cells))
    groups = list(dict.fromkeys(f"{c.mode}/{c.variant}" for c in cells))
    k = max((c.summary.counts.k for c in cells), default=0)
    by = {(f"{c.mode}/{c.variant}", c.build): c for c in cells}
    flags = {
        d.cell: "inconclusive" if d.kind == Kind.INCONCLUSIVE else d.severity.value
        for d in findings
        if isinstance(d.payload, BuildDivergence)
    }

    def rates(group: str, build: str) -> list[float | None]:
        c = by.get((group, build))
        return [None] * k if c is None else [c.summary.per_pos[i] if i < c.summary.counts.k else None for i in range(k)]

    table = [[rates(g, b) for b in builds] for g in groups]
    refs = [rates(g, ref) for g in groups]
    return BuildsView(
        reference_build=ref,
        builds=builds,
        groups=groups,
        k=k,
        rates=table,
        deltas=[
            [
                [None] * k if b == ref else [_rate_gap(r, refs[gi][i]) for i, r in enumerate(table[gi][bi])]
                for bi, b in enumerate(builds)
            ]
            for gi in range(len(groups))
        ],
        al=[[None if (g, b) not in by else by[(g, b)].summary.acceptance_length for b in builds] for g in groups],
        flagged=[[flags.get(by[(g, b)].cell, "") if (g, b) in by else "" for b in builds] for g in groups],
    )
