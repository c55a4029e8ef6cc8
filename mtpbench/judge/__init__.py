"""From records to verdicts: the one evidence stage (evidence.py), statistics, checks, typed findings and the
exit-code policy. Computes; never prints or words.

The way a judging goes (compare.py says it step by step): `admit` a baseline (or refuse it, exit 4),
`collect_evidence` once, `make_plan`, then `check` and `diagnose`, put together by `combine` into a
`Comparison`; `judge` makes the whole pass, `analyze` and compare.compare are it without and with a
baseline (compare.compare is not named here: the package attribute `compare` is its module).
`history` and `baseline save` read the same evidence (history.py, save.py).

The names below are the stage's face. They are loaded on first use (PEP 562): the stage brings pandas and
scipy, which a process that only needs one light module of it (the report's painter unpickling
figdata.py's classes) must not pay for.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Comparison": "compare",
    "Checked": "compare",
    "admit": "plan",
    "Against": "plan",
    "Plan": "plan",
    "make_plan": "plan",
    "check": "compare",
    "diagnose": "diagnoses",
    "combine": "compare",
    "judge": "compare",
    "analyze": "compare",
    "Evidence": "evidence",
    "CellMeta": "evidence",
    "CellResult": "evidence",
    "collect_evidence": "evidence",
    "Finding": "findings",
    "Kind": "findings",
    "Severity": "findings",
    "Verdict": "findings",
    "Cause": "findings",
    "build_history": "history",
    "baseline_of_run": "save",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
