"""The engine held against the reference (judge/signals/reference_comparison.py's ReferenceComparison): the one row
builder of its table (`reference_rows`: `mtpbench reference`'s console table, and the reference table of `compare`'s
console and Markdown and of `report --html`), the verdict line and the JSON document (`reference_section` is what
`compare --json` carries; `mtpbench reference --json` adds the findings). The findings' sentences are
render/words/reference.py's (through words.finding_line, as every other finding's). Nothing here computes;
every number is the judge's."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.table import Table
from rich.text import Text

from mtpbench.judge.findings import Kind
from mtpbench.judge.signals.reference_comparison import AL, CellAgreement, ReferenceCheck, ReferenceComparison
from mtpbench.render.words import cause_text, finding_line, finding_message
from mtpbench.render.words.reference import (
    COLUMN_EXACT,
    COLUMN_LARGEST,
    COLUMN_POSITION_SUB,
    reference_title,
)
from mtpbench.render.words.units import pct

__all__ = [
    "ABOVE_STYLE",
    "BELOW_STYLE",
    "finding_lines",
    "position_name",
    "reference_document",
    "reference_rows",
    "reference_section",
    "reference_table",
    "summary_line",
]

# The styles of a check below / above the reference (rich styles; the HTML maps them to its classes).
BELOW_STYLE = "bold red"
ABOVE_STYLE = "yellow"

# The shapes of render/report.py's row builders (kept here, not imported: report.py imports this module).
_Cell = tuple[str, str, str]  # (main text, detail on a dim second line or "", style of the main text)
_Column = tuple[str, str, str]  # (title, subtitle, justify)


def position_name(position: int) -> str:
    return "AL" if position == AL else f"pos{position}"


def _diff(c: ReferenceCheck) -> str:
    if c.diff.value is None:
        return "–"
    if c.position == AL:
        return f"{c.diff.value:+.3f}"
    return f"{100 * c.diff.value:+.1f}"


def _value(c: ReferenceCheck, engine: bool) -> str:
    x = c.engine if engine else c.reference
    if x is None:
        return "–"
    return f"{x:.3f}" if c.position == AL else pct(x)


def reference_rows(cmp: ReferenceComparison) -> tuple[list[_Column], list[list[_Cell]]]:
    """One row per cell: exact-match share, largest deviation, and per position (and AL) the engine's pooled
    rate beside the reference's, their difference (points; tokens for AL) on the dim line below."""
    k = max((len(a.pooled()) - 1 for a in cmp.cells), default=0)
    cols: list[_Column] = [("cell", "", "left"), (COLUMN_EXACT, "", "right"), (COLUMN_LARGEST, "", "right")]
    cols += [(position_name(i), COLUMN_POSITION_SUB, "right") for i in [*range(k), AL]]
    rows: list[list[_Cell]] = []
    for a in cmp.cells:
        row: list[_Cell] = [(a.cell, "", ""), (_exact(a), "", ""), (_largest(a), "", "")]
        checks = a.pooled()
        for c in checks:
            if c.position == AL:
                # A k sweep's narrower cell: blank positions up to the widest k, so AL stays in its column.
                row.extend([("", "", "")] * (k - (len(checks) - 1)))
            mark = " ▼" if c.below else (" ▲" if c.above else "")
            style = BELOW_STYLE if c.below else (ABOVE_STYLE if c.above else "")
            row.append((f"{_value(c, True)} / {_value(c, False)}{mark}", f"Δ {_diff(c)}", style))
        rows.append(row)
    return cols, rows


def reference_table(cmp: ReferenceComparison) -> Table:
    """`mtpbench reference`'s console table, from `reference_rows`."""
    cols, rows = reference_rows(cmp)
    table = Table(title=reference_title(cmp.run_id), title_justify="left")
    for title, sub, justify in cols:
        table.add_column(f"{title} {sub}".strip(), justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*(Text(f"{main} ({detail})" if detail else main, style=style) for main, detail, style in row))
    return table


def _exact(a: CellAgreement) -> str:
    if not a.same_text:
        return f"0/{a.observations} same text"
    return f"{a.exact}/{a.same_text}"


def _largest(a: CellAgreement) -> str:
    d = a.largest
    if d is None or d.points == 0:
        return "0.0"
    return f"{d.points:+.1f} {d.prompt_id} r{d.repeat} {position_name(d.position)}"


def finding_lines(cmp: ReferenceComparison) -> list[str]:
    """Each finding's line, and under it the likely cause, as compare prints its findings."""
    out: list[str] = []
    for f in cmp.findings:
        out.append(finding_line(f))
        cause = cause_text(f)
        if cause:
            out.append(f"       likely cause: {cause}")
    return out


def summary_line(cmp: ReferenceComparison) -> str:
    """The last line: agreement over every cell, and the exit code's reason."""
    same = sum(a.same_text for a in cmp.cells)
    exact = sum(a.exact for a in cmp.cells)
    obs = sum(a.observations for a in cmp.cells)
    below = [f.cell for f in cmp.findings if f.kind == Kind.ENGINE_BELOW_REFERENCE]
    inexact = [f.cell for f in cmp.findings if f.kind == Kind.EXACTNESS_LOST]
    head = "FAIL" if below or inexact else "PASS"
    text = (
        f"{head}: {exact} of {same} prompt observations with the reference's text count exactly what the weights say "
        f"({obs} held, {len(cmp.cells)} cell(s))"
    )
    if below:
        text += f"; engine below the reference in {', '.join(below)}"
    if inexact:
        text += f"; prompts no longer exact in {', '.join(inexact)}"
    if cmp.not_held:
        text += f"; not held: {', '.join(cmp.not_held)}"
    return text + f" (exit {int(cmp.exit_code)})"


def _check_json(c: ReferenceCheck) -> dict[str, Any]:
    return {
        "position": position_name(c.position),
        "repeat": c.repeat,
        "hash_seed": c.hash_seed,
        "engine": c.engine,
        "reference": c.reference,
        "diff": c.diff.value,
        "se": c.diff.se,
        "upper": c.upper,
        "lower": c.lower,
        "tolerance": c.tolerance,
        "alpha": c.alpha,
        "below": c.below,
        "above": c.above,
    }


def reference_section(cmp: ReferenceComparison) -> dict[str, Any]:
    """The held reference without its findings: what `compare --json` and `report`'s JSON carry beside their
    own findings (where the reference's findings already are)."""
    return {
        "run_id": cmp.run_id,
        "session": cmp.session,
        "replayed": cmp.replayed,
        "false_alarm": cmp.false_alarm,
        "tolerance_pts": cmp.tolerance_pts,
        "tolerance_al_pct": cmp.tolerance_al_pct,
        "not_held": cmp.not_held,
        "cells": [
            {
                "cell": a.cell,
                "prompts": a.prompts,
                "observations": a.observations,
                "same_text": a.same_text,
                "exact": a.exact,
                "exact_share": a.exact_share,
                "largest": None if a.largest is None else dataclasses.asdict(a.largest),
                "engine_drafts": a.engine_drafts,
                "reference_drafts": a.reference_drafts,
                "fewer": a.fewer,
                "more": a.more,
                "text_differs": [{"repeat": r, "prompt_id": p} for r, p in a.text_differs],
                "unbalanced": [dataclasses.asdict(u) for u in a.unbalanced],
                "checks": [_check_json(c) for c in a.checks],
            }
            for a in cmp.cells
        ],
    }


def reference_document(cmp: ReferenceComparison) -> dict[str, Any]:
    """The JSON document of `mtpbench reference --json`: the section, its exit code and its findings."""
    return {
        **reference_section(cmp),
        "exit_code": int(cmp.exit_code),
        "findings": [
            {
                "kind": f.kind.value,
                "severity": f.severity.value,
                "cell": f.cell,
                "message": finding_message(f),
                "cause": cause_text(f),
                "numbers": f.numbers,
            }
            for f in cmp.findings
        ],
    }
