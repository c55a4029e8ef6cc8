"""The engine held against the reference (judge/reference.py's ReferenceComparison) in words: the console's
table, a sentence per finding, and the JSON document. Nothing here computes; every number is the judge's."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from mtpbench.judge.reference import (
    AL,
    CellAgreement,
    ReferenceCheck,
    ReferenceComparison,
    ReferenceFinding,
    ReferenceKind,
)
from mtpbench.render.fmt import pct

# How many prompts a sentence names before "and N more" (the JSON names them all).
NAMED_PROMPTS = 5


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


def _prompts(prompts: tuple[str, ...]) -> str:
    named = ", ".join(prompts[:NAMED_PROMPTS])
    more = len(prompts) - NAMED_PROMPTS
    return named + (f" and {more} more" if more > 0 else "")


def finding_sentence(f: ReferenceFinding) -> str:
    """One line per finding, what the console, Markdown and CI annotations print."""
    where = ", ".join(position_name(p) for p in f.positions)
    if f.kind == ReferenceKind.BELOW:
        numbers = "; ".join(f"{position_name(c.position)} {_value(c, True)} vs {_value(c, False)}" for c in f.checks)
        seeds = ", ".join("?" if s is None else str(s) for s in f.hash_seeds)
        return (
            f"FAIL engine-below-reference {f.cell}: the engine accepts significantly less than its weights say at "
            f"{where} ({numbers}; engine vs reference)"
            + (f", in the repeat(s) with PYTHONHASHSEED {seeds} on their own" if seeds else "")
            + f"; {len(f.prompts)} prompt(s) accepted fewer drafts: {_prompts(f.prompts)}. "
            "No baseline is involved: an engine-side bug (draft metadata, KV binding, the proposer) is the likely cause"
        )
    if f.kind == ReferenceKind.DISAGREEMENT:
        parts = []
        if f.checks:
            parts.append(f"the engine counts more accepted drafts than the weights allow at {where}")
        if f.unbalanced:
            u = f.unbalanced[0]
            parts.append(
                f"{len(f.unbalanced)} prompt(s) whose counters do not add up with the text they produced (e.g. "
                f"{u.prompt_id} r{u.repeat}: {u.num_drafts} drafts, {u.num_accepted_tokens} accepted, "
                f"{u.generated} tokens)"
            )
        return (
            f"WARN reference-disagreement {f.cell}: " + "; ".join(parts) + ": the engine's counters, or a proposer "
            "detail the reference does not model"
        )
    return (
        f"WARN reference-text-differs {f.cell}: {len(f.prompts)} prompt(s) generated other text than the target's "
        f"greedy text recomputed from the weights ({_prompts(f.prompts)}): numerics of the target, not the drafter"
    )


def summary_line(cmp: ReferenceComparison) -> str:
    """The last line: agreement over every cell, and the exit code's reason."""
    same = sum(a.same_text for a in cmp.cells)
    exact = sum(a.exact for a in cmp.cells)
    obs = sum(a.observations for a in cmp.cells)
    below = [f.cell for f in cmp.findings if f.kind == ReferenceKind.BELOW]
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
                "largest": None if a.largest is None else a.largest.__dict__,
                "engine_drafts": a.engine_drafts,
                "reference_drafts": a.reference_drafts,
                "fewer": a.fewer,
                "more": a.more,
                "text_differs": [{"repeat": r, "prompt_id": p} for r, p in a.text_differs],
                "unbalanced": [u.__dict__ for u in a.unbalanced],
                "checks": [_check_json(c) for c in a.checks],
            }
            for a in cmp.cells
        ],
        "findings": [
            {
                "kind": f.kind.value,
                "cell": f.cell,
                "positions": [position_name(p) for p in f.positions],
                "hash_seeds": list(f.hash_seeds),
                "prompts": list(f.prompts),
                "message": finding_sentence(f),
            }
            for f in cmp.findings
        ],
    }
