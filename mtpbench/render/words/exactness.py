"""The words of exactness-lost (judge/signals/exactness.py): prompts that stopped counting exactly what the weights say
(or what the reference build counts) on a platform the run showed exact. Sentences only."""

from __future__ import annotations

from mtpbench.judge.findings.exactness import AGAINST_WEIGHTS, ExactnessLost

__all__ = ["msg_exactness_lost"]


def _al(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _named(n: ExactnessLost) -> str:
    more = n.inexact - len(n.differing)
    return ", ".join(n.differing) + (f" and {more} more" if more > 0 else "")


def msg_exactness_lost(n: ExactnessLost) -> str:
    if n.against == AGAINST_WEIGHTS:
        what = "count otherwise than the weights say"
        anchor = (
            f"{n.anchor} of reference build {n.reference_build} counts exactly what the weights say on all "
            f"{n.anchor_prompts} prompts × {n.anchor_repeats} repeat(s)"
        )
        reference = "reference"
    else:
        what = f"count otherwise than reference build {n.reference_build}"
        anchor = f"{n.anchor} repeats itself prompt for prompt over {n.anchor_repeats} fresh processes"
        reference = n.reference_build
    change = "" if n.al_change_pct is None else f", {n.al_change_pct:+.1f} %"
    inside = (
        f"within the {n.tolerance_al_pct:g} % δ the pooled checks ask for"
        if n.al_change_pct is not None and abs(n.al_change_pct) < n.tolerance_al_pct
        else f"δ {n.tolerance_al_pct:g} %"
    )
    floor = "" if n.floor <= 1 else f"; the floor between builds is {n.floor} prompts"
    return (
        f"{n.inexact} of {n.prompts} prompts with the same text {what} (build {n.build}), where {anchor}: "
        f"exact counts are evidence here, however small the pooled change (AL {_al(n.engine_al)} vs "
        f"{_al(n.reference_al)} {reference}{change}, {inside}); {n.fewer} of them accept fewer drafts per step: "
        f"{_named(n)}{floor}"
    )
