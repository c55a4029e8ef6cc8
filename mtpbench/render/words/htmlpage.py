"""The HTML report's headings and captions that change with the data: which check table is the gate's primary
endpoint (it is headed so and comes first), and what a row of the heat map is (a prompt, or a band of
prompt lengths or of the configured order: a caption that says "prompt" over rows that are bands misleads).
"""

from __future__ import annotations

# gate.primary (specs.GateSpec) -> the heading of its table, first on the page.
PRIMARY_HEADING = {
    "acceptance_length": "Primary endpoint: acceptance length (AL) against the baseline",
    "positions": "Primary endpoint: per-position acceptance against the baseline",
}
# The other table (keyed by what it checks), below the figures: a diagnosis, not what a pass certifies.
DIAGNOSIS_HEADING = {
    "positions": "Per-position acceptance against the baseline (diagnoses)",
    "acceptance_length": "Acceptance length (AL) against the baseline (diagnoses)",
}
NO_BASELINE = "No baseline given: only the signatures that need none were checked."
NO_PRIMARY = "No cell has a baseline entry to check it against (see the diagnoses)."


def unchecked_text(fields: list[str]) -> str:
    return f"Not checked (the baseline lacks them): {', '.join(fields)}"


def heatmap_title(rows_kind: str) -> str:
    """The figure's title; rows_kind is views.Heatmap.rows."""
    what = "prompt" if rows_kind == "prompt" else f"band of {rows_kind}"
    return f"acceptance per {what} and position (pooled over repeats)"


def heatmap_axis(rows_kind: str) -> str:
    """The label of the heat map's row axis."""
    return "prompt" if rows_kind == "prompt" else f"band of {rows_kind}"


def heatmap_caption(rows_kind: str) -> str:
    if rows_kind == "prompt":
        return (
            "Acceptance % per prompt and position, pooled over repeats. ≠ marks a prompt whose greedy text "
            "differs from the rest of its build (the target's numerics changed); without ≠ the text is identical "
            "and a drop is the drafter's."
        )
    return (
        f"Acceptance % per band of {rows_kind} and position, pooled over repeats and over the prompts of each "
        "band (too many prompts for a row each). ≠ marks a band with a prompt whose greedy text differs from "
        "the rest of its build (the target's numerics changed); without ≠ the text is identical and a drop is "
        "the drafter's."
    )
