"""The exactness-lost finding's payload (judge/signals/exactness.py fills it): a cell whose prompts stopped counting
exactly what the weights say (or what the reference build counts) where the run showed its platform exact.
Beside findings/__init__.py, whose Kind enum names it. AL in tokens per draft step."""

from __future__ import annotations

from dataclasses import dataclass

from mtpbench.judge.findings import Payload

# What a cell's prompts are held to: the weights' counts (a stored reference, `mtpbench reference`), or the
# reference build's counts (a run of several builds, with no reference stored for the cell).
AGAINST_WEIGHTS = "weights"
AGAINST_REFERENCE_BUILD = "reference-build"


@dataclass(frozen=True, kw_only=True)
class ExactnessLost(Payload):
    """`anchor` is the cell whose exactness makes an inexact prompt evidence: against the weights, a cell of
    the reference build that counted exactly what the weights say on every prompt and repeat; against the
    reference build, its cell of the same mode and variant, identical prompt for prompt across its repeats.
    `prompts` counts the prompts compared (the cell's text equal to the anchor's on each), `inexact` those
    whose counts differ on some repeat (the first ten named in `differing`, the largest losses first), `fewer`
    those of them that accept fewer tokens per draft step. `engine_al` / `reference_al` are the pooled
    acceptance lengths (`al_change_pct` the change in % of the reference's), beside the gate's δ
    (`tolerance_al_pct`): how little the pooled checks saw. `floor`: the fewest inexact prompts that fail."""

    against: str  # AGAINST_WEIGHTS | AGAINST_REFERENCE_BUILD
    build: str
    reference_build: str
    anchor: str
    anchor_prompts: int  # prompts the anchor counted exactly, on every repeat
    anchor_repeats: int
    prompts: int
    inexact: int
    differing: list[str]
    fewer: int
    engine_al: float | None
    reference_al: float | None
    al_change_pct: float | None
    tolerance_al_pct: float
    floor: int
