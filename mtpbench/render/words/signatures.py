"""The words of the bug signatures the judge names without a baseline: cross-process-instability (greedy repeats
in fresh processes disagree), graph-divergence (a graph or compiled mode differs from the eager reference at the
same build) and text-changed (greedy output differs). Sentences only.
"""

from __future__ import annotations

from mtpbench.judge.findings import Divergence, Instability, TextChanged
from mtpbench.render.words.checks import COUNTERS_ONLY_TEXT
from mtpbench.render.words.units import delta_ci, pct, pts
from mtpbench.schema import COUNTERS_ONLY

__all__ = ["msg_divergence", "msg_instability", "msg_text_changed"]


def _seeds(per_seed: dict[str, float]) -> str:
    return ", ".join(f"PYTHONHASHSEED={s}: {100 * r:.1f} %" for s, r in per_seed.items())


def msg_instability(n: Instability) -> str:
    head = (
        f"greedy repeats disagree on {n.prompts_differing} of {n.prompts} prompts (exact comparison of counts "
        "and output per prompt)"
        if n.method == "exact"
        else f"repeats differ beyond prompt-level sampling noise (permutation test over {n.prompts} prompts, "
        f"p={n.pvalue:.2g})"
    )
    text = ""
    if n.method == "exact":
        text = (
            "; generated text identical across repeats, so the drafter's inputs, not the target, vary"
            if n.same_text
            else "; generated text also differs across repeats"
        )
    return f"{head}; pos{n.pos}: {_seeds(n.per_seed)} (spread {100 * n.spread:.1f} pts){text}"


def msg_divergence(n: Divergence) -> str:
    graphs = n.effective_cudagraph_mode not in (None, "NONE")
    what = "graph mode" if graphs else "compiled mode"
    note = "" if graphs else f" (effective cudagraph_mode {n.effective_cudagraph_mode}: no graphs ran)"
    text = (
        "the generated text was not compared (no prompt in common)"
        if n.same_text is None
        else "identical generated text: the target is unaffected, the draft path differs"
        if n.same_text
        else "generated text differs too: the target's numerics changed in this mode"
    )
    evidence = (
        f"{pts(n.delta)} pts, beyond the {n.tolerance_pts:g}-pt divergence tolerance; {COUNTERS_ONLY_TEXT}"
        if n.method == COUNTERS_ONLY
        else f"{pts(n.delta)} pts, CI {delta_ci(n.ci)}, {n.prompts} prompts"
    )
    return (
        f"{what} {n.mode} differs from {n.reference_mode} at the same build and variant: pos{n.pos} "
        f"{pct(n.run_rate)} % vs {pct(n.reference_rate)} % ({evidence}){note}; {text}"
    )


def msg_text_changed(n: TextChanged) -> str:
    return f"greedy output differs across cells/repeats of build {n.build} for prompts {', '.join(n.prompts)}"
