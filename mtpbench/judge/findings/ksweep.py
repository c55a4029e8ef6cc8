"""The k-dependent-acceptance finding's payload (judge/signals/ksweep.py fills it): in a k sweep (issue 38), a cell
whose acceptance departs at its k where the same build, mode and variant at another k does not. Beside
findings/__init__.py,
whose Kind enum names it. Rates are fractions."""

from __future__ import annotations

from dataclasses import dataclass, field

from mtpbench.judge.findings import OMIT_NONE, Payload


@dataclass(frozen=True, kw_only=True)
class KDependence(Payload):
    """`basis` says what the cell departs from:

    - "pos0": no reference needed. Greedy drafting makes the first draft of a step independent of k, so the
      cell's pos0 is held against pos0 of the same build/mode/variant at the smallest k (`reference_k`),
      paired by prompt by graph divergence's rule (`delta`, `ci`, `prompts`; δ = `tolerance_pts`).
    - "reference": the cell falls below (or stops counting exactly) what the weights give at its k, while the
      same build/mode/variant at `agreeing_ks` does not (`reference_findings`: the reference's kinds for it).
    """

    basis: str  # "pos0" | "reference"
    k: int
    reference_k: int | None  # the k held against (pos0); None for the reference basis
    agreeing_ks: list[int]  # reference basis: the group's k whose cells count what the weights give
    reference: str  # the cell held against (pos0), or "weights"
    pos: int | None = field(default=None, metadata=OMIT_NONE)
    delta: float | None = field(default=None, metadata=OMIT_NONE)
    ci: list[float] | None = field(default=None, metadata=OMIT_NONE)
    prompts: int | None = field(default=None, metadata=OMIT_NONE)
    run_rate: float | None = field(default=None, metadata=OMIT_NONE)
    reference_rate: float | None = field(default=None, metadata=OMIT_NONE)
    tolerance_pts: float | None = field(default=None, metadata=OMIT_NONE)
    reference_findings: list[str] = field(default_factory=list)
