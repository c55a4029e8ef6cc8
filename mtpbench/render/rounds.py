"""A soak run's per-round acceptance (judge/signals/drift.py's round_stats) as the tables' column and the JSON
document's `rounds`: the console's rich table, the Markdown and the JSON share them (report.py)."""

from __future__ import annotations

from typing import Any

from mtpbench.judge.evidence import CellResult
from mtpbench.judge.signals.drift import round_stats
from mtpbench.render.words.units import pct

COLUMN = ("mean % per round", "of one engine", "left")


def rounds_cell(c: CellResult) -> tuple[str, str, str]:
    """The tables' per-round column of a soak cell: mean acceptance % of each round (the first three and the
    last three of a long soak), and below it the lowest round; blank for other cells."""
    st = round_stats(c)
    if not st:
        return ("", "", "")
    means = [pct(r.mean) for r in st]
    text = " ".join(means) if len(means) <= 6 else " ".join([*means[:3], "…", *means[-3:]])
    rated = [r for r in st if r.mean is not None]
    low = min(rated, key=lambda r: r.mean or 0.0) if rated else None
    detail = f"{len(st)} rounds" + (f", lowest {pct(low.mean)} at r{low.round}" if low is not None else "")
    return (text, detail, "red" if len(set(means)) > 1 else "")


def rounds_document(cells: list[CellResult]) -> dict[str, list[dict[str, Any]]]:
    """The JSON document's `rounds`: per soak cell, every round's pooled counts and mean acceptance."""
    return {c.cell: [{**r.__dict__, "mean": r.mean} for r in round_stats(c)] for c in cells if c.rounds is not None}
