"""The words of the context sweep (judge/signals/context.py): context-decay (a longer bucket accepting less than the
first, paired by prompt), its inconclusive form, and the headings of the per-bucket table and plot that
compare/show and the HTML report draw. Sentences only.
"""

from __future__ import annotations

from mtpbench.judge.findings.context import ContextBucket, ContextDecay
from mtpbench.render.words.units import delta_ci, pct, pts

__all__ = [
    "BUCKET_HEADERS",
    "PLOT_CAPTION",
    "PLOT_TITLE",
    "PLOT_X",
    "PLOT_Y",
    "TABLE_TITLE",
    "bucket_cells",
    "msg_context_decay",
    "msg_context_inconclusive",
    "trend_text",
]

TABLE_TITLE = "Acceptance per context bucket (the same prompts behind a shared context of growing length)"
BUCKET_HEADERS = ["cell", "context tokens", "prompts", "per-position %", "mean %", "AL"]
PLOT_TITLE = "Acceptance by context length"
PLOT_X = "shared context before each prompt (tokens)"
PLOT_Y = "acceptance (%)"
PLOT_CAPTION = (
    "Acceptance per position (and the mean, black) of the same prompts behind a shared context of each length, "
    "greedy: a line that falls with context is the draft path losing track of a long context; each bucket is "
    "held against the first, prompt by prompt (context-decay)."
)


def _rates(b: ContextBucket) -> str:
    return " / ".join(pct(r) for r in b.per_pos)


def bucket_cells(cell: str, b: ContextBucket) -> list[str]:
    """One row of the per-bucket table, as BUCKET_HEADERS names its columns."""
    al = "—" if b.acceptance_length is None else f"{b.acceptance_length:.2f}"
    return [cell, str(b.tokens), str(b.prompts), _rates(b), pct(b.mean), al]


def trend_text(buckets: list[ContextBucket]) -> str:
    """`0 → 256 → 512 tokens: pos0 98.0 → 97.1 → 90.2 %` style, every position, for a finding's tail."""
    lengths = " → ".join(str(b.tokens) for b in buckets)
    k = len(buckets[0].per_pos) if buckets else 0
    rows = "; ".join(f"pos{i} " + " → ".join(pct(b.per_pos[i]) for b in buckets) + " %" for i in range(k))
    return f"{lengths} tokens: {rows}"


def msg_context_decay(n: ContextDecay) -> str:
    return (
        f"acceptance falls with context: pos{n.pos} {pct(n.run_rate)} % behind {n.tokens} tokens vs "
        f"{pct(n.reference_rate)} % in the {n.reference_tokens}-token bucket ({pts(n.delta)} pts, CI {delta_ci(n.ci)}, "
        f"{n.prompts} prompts paired, beyond the {n.tolerance_pts:g}-pt tolerance); {trend_text(n.buckets)}"
    )


def msg_context_inconclusive(n: ContextDecay) -> str:
    return (
        f"pos{n.pos} behind {n.tokens} tokens is {abs(100 * n.delta):.1f} pts below the {n.reference_tokens}-token "
        "bucket, beyond the "
        f"{n.tolerance_pts:g}-pt tolerance, but the data cannot support it (CI {delta_ci(n.ci)}, {n.prompts} "
        "prompts)"
    )
