"""The words of build-divergence (judge/signals/builds.py): a build that accepts otherwise than the reference build at
the same mode and variant, paired by prompt. Sentences only.
"""

from __future__ import annotations

from mtpbench.judge.figdata import BuildsView
from mtpbench.judge.findings.builds import BuildDivergence
from mtpbench.render.words.checks import COUNTERS_ONLY_TEXT
from mtpbench.render.words.units import delta_ci, pct, pts
from mtpbench.schema import COUNTERS_ONLY

__all__ = [
    "BUILDS_CAPTION",
    "BUILDS_TABLE_NOTE",
    "BUILDS_TITLE",
    "builds_outcome",
    "builds_summary",
    "msg_build_divergence",
    "prompts_moved_text",
]

BUILDS_CAPTION = (
    "Acceptance per position for each build, one panel per mode and variant, the builds in the config's order; "
    "the dashed column is the reference build every other build is held against (build-divergence)."
)
BUILDS_TITLE = "Builds × positions (each build against the reference build, same mode and variant)"
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


def builds_outcome(bv: BuildsView) -> str:
    """The run's build comparison in one word: build-divergence, inconclusive or none (the JSON's value)."""
    flags = {f for row in bv.flagged for f in row}
    if "fail" in flags:
        return "build-divergence"
    if "inconclusive" in flags:
        return "inconclusive"
    return "none"


def builds_summary(bv: BuildsView, tolerance_pts: float) -> str:
    """One sentence: how the builds compared, divergence or its absence, with the cells it names."""
    others = [b for b in bv.builds if b != bv.reference_build]
    flagged = [
        f"{build} {group}"
        for gi, group in enumerate(bv.groups)
        for bi, build in enumerate(bv.builds)
        if bv.flagged[gi][bi] in ("fail", "inconclusive")
    ]
    outcome = builds_outcome(bv)
    held = f"{', '.join(others)} held against reference build {bv.reference_build}"
    if outcome == "build-divergence":
        return f"builds: build-divergence ({held}): {', '.join(flagged)} accept otherwise, paired by prompt"
    if outcome == "inconclusive":
        return (
            f"builds: inconclusive ({held}): {', '.join(flagged)} differ beyond the {tolerance_pts:g}-pt tolerance "
            "but the data cannot support it"
        )
    return (
        f"builds: no build-divergence ({held} in {len(bv.groups)} mode/variant(s)): no build accepts less or more "
        f"beyond the gate's paired rule ({tolerance_pts:g}-pt tolerance)"
    )
