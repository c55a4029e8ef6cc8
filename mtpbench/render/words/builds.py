"""The words of build-divergence (judge/builds.py): a build that accepts otherwise than the reference build at
the same mode and variant, paired by prompt. Sentences only.
"""

from __future__ import annotations

from mtpbench.judge.findings_builds import BuildDivergence
from mtpbench.render.words.checks import COUNTERS_ONLY_TEXT
from mtpbench.render.words.units import delta_ci, pct, pts
from mtpbench.schema import COUNTERS_ONLY

__all__ = ["BUILDS_CAPTION", "BUILDS_TABLE_NOTE", "msg_build_divergence", "prompts_moved_text"]

BUILDS_CAPTION = (
    "Acceptance per position for each build, one panel per mode and variant, the builds in the config's order; "
    "the dashed column is the reference build every other build is held against (build-divergence)."
)
BUILDS_TABLE_NOTE = (
    "Per position: acceptance % and, beside it, the gap to the reference build's same mode and variant in "
    "points (pooled rates; the finding's Δ is paired by prompt). A build flagged fail accepts less than the "
    "reference build by the gate's paired rule."
)


def prompts_moved_text(n: BuildDivergence) -> str:
    """`3 prompts moved at pos2: class, parsing, unit-test` (the first ten named, all counted)."""
    if not n.prompts_differing:
        return f"no single prompt moved at pos{n.pos}"
    more = n.prompts_differing - len(n.differing)
    tail = f" and {more} more" if more > 0 else ""
    return f"{n.prompts_differing} prompts moved at pos{n.pos}: {', '.join(n.differing)}{tail}"


def msg_build_divergence(n: BuildDivergence) -> str:
    direction = "accepts less than" if (n.delta or 0) < 0 else "accepts more than"
    text = (
        "the generated text was not compared (no prompt in common)"
        if n.same_text is None
        else "identical generated text: the target is unaffected, the build's draft path differs"
        if n.same_text
        else "generated text differs too: the target's output changed with the build"
    )
    evidence = (
        f"{pts(n.delta)} pts, beyond the {n.tolerance_pts:g}-pt divergence tolerance; {COUNTERS_ONLY_TEXT}"
        if n.method == COUNTERS_ONLY
        else f"{pts(n.delta)} pts, CI {delta_ci(n.ci)}, {n.prompts} prompts"
    )
    return (
        f"build {n.build} {direction} reference build {n.reference_build} in mode {n.mode}: pos{n.pos} "
        f"{pct(n.run_rate)} % vs {pct(n.reference_rate)} % ({evidence}); {prompts_moved_text(n)}; {text}"
    )
