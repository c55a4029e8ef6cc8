"""The render stage: words and layout of what the judge found, computing nothing. Its outputs and their modules:
the console (report.py: the comparison's tables and verdict line; serving.py: the serving table; sizingreport.py;
historyreport.py), the JSON document and Markdown (the same modules: one row builder feeds every table), JUnit
(junit.py), GitHub Actions' step summary and annotations and a console that never crops in a log (ci.py), the
HTML report and its PNG figures (htmlreport.py, with bindinggrid.py, plots.py and painter.py, the second process
that draws them). Every sentence (a finding, its likely cause, the verdict line) is in words/, one module per
finding family; rounds.py is a soak run's per-round column and JSON part, which report.py lays out.

The stage's public functions are named here (`__all__`) and imported from their module on first use: the CLI's
console needs rich alone, and the painter's process (`python -m mtpbench.render.painter`) must start drawing
while the parent loads the run, so importing one renderer must not import every renderer's dependencies.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name, by the module that defines it.
_HOME: dict[str, tuple[str, ...]] = {
    "ci": ("make_console", "github_enabled", "publish"),
    "report": (
        "comparison_renderable",
        "comparison_document",
        "comparison_json",
        "comparison_markdown",
        "not_comparable_json",
    ),
    "junit": ("comparison_junit", "not_comparable_junit"),
    "serving": ("serving_table", "serving_markdown", "add_to_json"),
    "sizingreport": ("sizing_table",),
    "historyreport": ("history_renderable", "history_json", "write_outputs"),
    "htmlreport": ("Figures", "render_html", "write_report"),
    "painter": ("Painter",),
    "plots": ("check_installed",),
    "words": ("finding_message", "cause_text", "verdict_text"),
}
_MODULE = {name: module for module, names in _HOME.items() for name in names}

__all__ = [
    "Figures",
    "Painter",
    "add_to_json",
    "cause_text",
    "check_installed",
    "comparison_document",
    "comparison_json",
    "comparison_junit",
    "comparison_markdown",
    "comparison_renderable",
    "finding_message",
    "github_enabled",
    "history_json",
    "history_renderable",
    "make_console",
    "not_comparable_json",
    "not_comparable_junit",
    "publish",
    "render_html",
    "serving_markdown",
    "serving_table",
    "sizing_table",
    "verdict_text",
    "write_outputs",
    "write_report",
]


def __getattr__(name: str) -> Any:
    """`mtpbench.render.<public name>`: the name from its module, imported now (PEP 562)."""
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
