"""Numbers as the words write them: a fraction as the percentage people read, a difference in points, an
interval in percent or in points, an enum as its value. Every sentence (words/) and every table (report.py,
rounds.py, htmlreport.py) writes a number through these, so one number reads the same everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mtpbench.judge.stats import Interval

__all__ = ["ci_text", "count", "delta_ci", "enum_text", "pct", "pts"]


def pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage without the sign: 0.948 -> "94.8"; "–" where there is none."""
    return "–" if x is None else f"{100 * x:.{digits}f}"


def pts(x: float | None) -> str:
    """A difference of fractions in signed percentage points: -0.053 -> "-5.3"."""
    return "–" if x is None else f"{100 * x:+.1f}"


def ci_text(ci: Interval | None) -> str:
    """A rate's interval in percent, as the tables' dim second line: "[93.1,96.2]"; blank where there is none."""
    return "" if ci is None else f"[{100 * ci.low:.1f},{100 * ci.high:.1f}]"


def delta_ci(ci: list[float] | None) -> str:
    """A difference's interval in signed points, as the findings write it."""
    if ci is None:
        return "no interval (fewer than 2 prompts with drafts)"
    return f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def count(n: int, noun: str) -> str:
    """A count with its noun in the number it takes: "1 cell", "0 cells", "3 cells" (a regular plural)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def enum_text(x: Any) -> str:
    """An enum's value, or a plain string as it is (compare's verdicts and severities may be either)."""
    return str(getattr(x, "value", x))
