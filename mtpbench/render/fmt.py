"""Fractions as the percentages people read: shared by words.py, words_soak.py and the tables."""

from __future__ import annotations


def pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}"
