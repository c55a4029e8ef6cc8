"""The acceptance-length table (a row per cell: the primary endpoint of the default gate), as rows the
console's rich table, the Markdown and the HTML page share (report.rich_table / markdown_table)."""

from __future__ import annotations

from mtpbench.judge.checks import LengthCheck
from mtpbench.judge.findings import Verdict
from mtpbench.schema import COUNTERS_ONLY

Column = tuple[str, str, str]  # name, unit, justify
Cell = tuple[str, str, str]  # text, detail, style

STYLE = {
    Verdict.REGRESSION: "bold red",
    Verdict.INCONCLUSIVE: "bold yellow",
    Verdict.IMPROVEMENT: "cyan",
    Verdict.PASS: "green",
    Verdict.NO_DATA: "red",
}


def _tok(x: float | None, sign: bool = False) -> str:
    return "–" if x is None else f"{x:+.3f}" if sign else f"{x:.3f}"


def length_rows(lengths: list[LengthCheck], primary: bool, ci: bool = True) -> tuple[list[Column], list[list[Cell]]]:
    """One row per cell: AL of the run and of its baseline entry, Δ, its interval, δ and the MDE (tokens per
    draft step); the verdict says whether it is the gate's primary endpoint or a diagnosis."""
    cols: list[Column] = [
        ("cell", "", "left"),
        ("AL run", "tok", "right"),
        ("AL base", "tok", "right"),
        ("Δ", "tok", "right"),
    ]
    if ci:
        cols += [("Δ CI", "tok", "right"), ("prompts", "", "right")]
    cols += [("δ", "tok", "right"), ("MDE", "tok", "right"), ("verdict", "", "left")]
    rows: list[list[Cell]] = []
    for x in lengths:
        weak = x.underpowered and x.verdict == Verdict.PASS
        note = f" ({COUNTERS_ONLY})" if x.method == COUNTERS_ONLY else " (underpowered)" if weak else ""
        role = "" if primary else " (diagnosis)"
        row: list[Cell] = [
            (x.cell, "", ""),
            (_tok(x.run_al), "", ""),
            (_tok(x.base_al), "", ""),
            (_tok(x.delta, True), "", ""),
        ]
        if ci:
            span = "" if x.ci is None else f"[{x.ci.low:+.3f},{x.ci.high:+.3f}]"
            row += [(span, "", ""), (str(x.prompts) if x.prompts else "–", "", "")]
        row += [
            (_tok(x.tolerance), "", ""),
            (_tok(x.mde), "", "yellow" if weak else ""),
            (x.verdict.value + note + role, "", STYLE.get(x.verdict, "")),
        ]
        rows.append(row)
    return cols, rows
