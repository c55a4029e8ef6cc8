"""The words of the reference's findings (judge/signals/reference_comparison.py): engine-below-reference,
reference-disagreement,
reference-text-differs. Sentences only."""

from __future__ import annotations

from mtpbench.judge.findings.reference import ReferenceBelow, ReferenceDisagreement, ReferenceTextDiffers
from mtpbench.render.words.units import pct

__all__ = [
    "COLUMN_EXACT",
    "COLUMN_LARGEST",
    "COLUMN_POSITION_SUB",
    "NAMED_PROMPTS",
    "msg_engine_below_reference",
    "msg_reference_disagreement",
    "msg_reference_text_differs",
    "reference_title",
]

# The reference table's column titles (render/referencereport.py reference_rows).
COLUMN_EXACT = "exact"
COLUMN_LARGEST = "largest Δ pts"
COLUMN_POSITION_SUB = "eng / ref"


def reference_title(run_id: str) -> str:
    """The reference table's title, on the console, in Markdown and in the HTML report."""
    return f"engine vs reference (acceptance from the weights), run {run_id}"


# How many prompts a sentence names before "and N more" (the JSON names them all).
NAMED_PROMPTS = 5


def _prompts(prompts: list[str]) -> str:
    more = len(prompts) - NAMED_PROMPTS
    return ", ".join(prompts[:NAMED_PROMPTS]) + (f" and {more} more" if more > 0 else "")


def _al(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def msg_engine_below_reference(n: ReferenceBelow) -> str:
    parts = [
        f"pos{i} {pct(e)} % vs {pct(r)} %"
        for i, e, r in zip(n.positions, n.engine_rates, n.reference_rates, strict=True)
    ]
    if n.al:
        parts.append(f"AL {_al(n.engine_al)} vs {_al(n.reference_al)}")
    seeds = ", ".join("?" if s is None else str(s) for s in n.hash_seeds)
    alone = f"; below on its own in the repeat(s) with PYTHONHASHSEED {seeds}" if seeds else ""
    return (
        f"the engine accepts less than its weights say ({'; '.join(parts)}, engine vs reference; δ "
        f"{n.tolerance_pts:g} pts, AL {n.tolerance_al_pct:g} %, one-sided α {n.alpha:.2g}){alone}; "
        f"{n.exact} of {n.observations} prompt observations count exactly what the weights say; "
        f"{len(n.prompts)} prompt(s) accepted fewer drafts: {_prompts(n.prompts)}"
    )


def msg_reference_disagreement(n: ReferenceDisagreement) -> str:
    parts = []
    if n.positions or n.al:
        where = [
            f"pos{i} {pct(e)} % vs {pct(r)} %"
            for i, e, r in zip(n.positions, n.engine_rates, n.reference_rates, strict=True)
        ]
        if n.al:
            where.append("AL")
        parts.append(f"the engine accepts more than its weights allow ({'; '.join(where)}, engine vs reference)")
    if n.unbalanced:
        u = n.unbalanced[0]
        parts.append(
            f"{len(n.unbalanced)} prompt observation(s) whose counters do not add up with the text they produced "
            f"(e.g. {u.prompt_id} repeat {u.repeat}: {u.num_drafts} drafts, {u.num_accepted_tokens} accepted, "
            f"{u.generated} tokens)"
        )
    return "; ".join(parts)


def msg_reference_text_differs(n: ReferenceTextDiffers) -> str:
    return (
        f"{n.observations} of {n.of} prompt observations generated other text than the target's greedy text "
        f"recomputed from the weights ({_prompts(n.prompts)})"
    )
