"""The words of an upstream golden's findings (judge/signals/upstream.py's UpstreamCheck): upstream-rule,
request-al-regression and request-al-inconclusive. The cell in the golden's definition and units, the limits
the upstream rule allows, which parts failed, and mtpbench's verdict beside it. Sentences only.
"""

from __future__ import annotations

from mtpbench.judge.signals.upstream import UpstreamCheck

__all__ = ["upstream_message"]


def _limit(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def upstream_message(n: UpstreamCheck) -> str:
    """The upstream rule's verdict in its own definition and units, beside mtpbench's."""
    what = "pooled" if n.definition == "pooled" else "mean over requests of per-request"
    parts = [f"{n.source} ({what} AL, {n.prompts} prompts)"]
    if n.golden_al is not None:
        lo, hi = n.al_limits or [None, None]
        allowed = f"≥ {_limit(lo)}" if hi is None else f"{_limit(lo)}–{_limit(hi)}"
        parts.append(f"AL {_limit(n.al)} vs golden {n.golden_al:g} (allowed {allowed})")
    if n.golden_per_pos:
        mins = n.pos_minimums or [None] * len(n.golden_per_pos)
        parts.append(
            "rates "
            + ", ".join(
                f"pos{i} {_limit(a, 4)} vs {g:g} (min {_limit(m, 4)})"
                for i, (a, g, m) in enumerate(zip(n.per_pos, n.golden_per_pos, mins, strict=True))
            )
        )
    else:
        parts.append("rates " + ", ".join(f"pos{i} {_limit(a, 4)}" for i, a in enumerate(n.per_pos)))
    parts.append("conditional " + ", ".join(f"pos{i} {_limit(c, 4)}" for i, c in enumerate(n.conditional)))
    failed = f" ({', '.join(n.failed)})" if n.failed else ""
    if n.al_ci is not None:
        parts.append(f"per-request AL one-sided lower bound {_limit(n.al_ci[0])}")
    verdicts = f"upstream rule: {n.upstream.upper()}{failed}; mtpbench's statistical verdict: {n.statistical}"
    return "; ".join(parts) + f". {verdicts}" + (": they disagree" if n.disagree else "")
