"""The engine held against the reference (judge/reference.py's ReferenceComparison): the console's table, the
verdict line and the JSON document. The findings' sentences are render/words/reference.py's (through
words.finding_line, as every other finding's). Nothing here computes; every number is the judge's."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.table import Table

from mtpbench.judge.findings import Kind
from mtpbench.judge.reference import AL, CellAgreement, ReferenceCheck, ReferenceComparison
from mtpbench.render.words import cause_text, finding_line, finding_message
from mtpbench.render.words.units import pct

__all__ = ["finding_lines", "position_name", "reference_document", "reference_table", "summary_line"]


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


def reference_table(cmp: ReferenceComparison) -> Table:
    """One row per cell: agreement, largest deviation, and engine vs reference per position and AL."""
    table = Table(title=f"engine vs reference (acceptance from the weights), run {cmp.run_id}", title_justify="left")
    table.add_column("cell")
    table.add_column("exact", justify="right")
    table.add_column("largest Δ pts", justify="right")
    k = max((len(a.pooled()) - 1 for a in cmp.cells), default=0)
    for i in [*range(k), AL]:
        table.add_column(f"{position_name(i)} eng / ref (Δ)", justify="right")
    for a in cmp.cells:
        row = [a.cell, _exact(a), _largest(a)]
        for c in a.pooled():
            mark = " ▼" if c.below else (" ▲" if c.above else "")
            row.append(f"{_value(c, True)} / {_value(c, False)} ({_diff(c)}){mark}")
        table.add_row(*row)
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
    head = "FAIL" if below else "PASS"
    text = (
        f"{head}: {exact} of {same} prompt observations with the reference's text count exactly what the weights say "
        f"({obs} held, {len(cmp.cells)} cell(s))"
    )
    if below:
        text += f"; engine below the reference in {', '.join(below)}"
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


def reference_document(cmp: ReferenceComparison) -> dict[str, Any]:
    """The JSON document of `mtpbench reference --json`."""
    return {
        "run_id": cmp.run_id,
        "session": cmp.session,
        "replayed": cmp.replayed,
        "exit_code": int(cmp.exit_code),
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
