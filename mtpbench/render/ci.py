"""CI-native output: a console that never crops in a log, and GitHub Actions' step summary and annotations.

- `make_console()`: where stdout is not a terminal (a CI log, a pipe, a file) rich has no width to fit and
  would assume 80 columns, cutting cells to "regressi…"; there the console is LOG_WIDTH wide, so tables take
  their natural width and no cell, number or verdict is cut. A terminal keeps its own width (and
  MTPBENCH_WIDTH still forces one).
- `github_lines()` / `publish()`: under GitHub Actions (GITHUB_ACTIONS=true) or with --github, the Markdown
  verdict is appended to $GITHUB_STEP_SUMMARY and every failing check becomes an `::error` workflow command
  naming the cell and the position (warnings become `::warning`). The escaping is the one GitHub's
  actions/toolkit applies (`escapeData` / `escapeProperty` in packages/core/src/command.ts).
Rendering only: every figure and verdict comes from the Comparison.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, ConsoleDimensions

if TYPE_CHECKING:
    from mtpbench.judge.compare import Comparison

LOG_WIDTH = 1000


class LogConsole(Console):
    """A rich Console that is LOG_WIDTH wide whenever it is not writing to a terminal."""

    def _size(self) -> ConsoleDimensions:
        dims = Console.size.fget(self)  # type: ignore[attr-defined]
        if self._width is None and not self.is_terminal:
            return ConsoleDimensions(LOG_WIDTH, dims.height)
        return dims

    size = property(_size, Console.size.fset)  # type: ignore[assignment, attr-defined]


def make_console(stderr: bool = False) -> LogConsole:
    raw = os.environ.get("MTPBENCH_WIDTH", "")
    width = int(raw) if raw.isdigit() and int(raw) > 0 else None
    return LogConsole(width=width, stderr=stderr)


def github_enabled(flag: bool, env: Mapping[str, str] = os.environ) -> bool:
    return flag or env.get("GITHUB_ACTIONS") == "true"


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def workflow_command(kind: str, title: str, message: str) -> str:
    """One GitHub workflow command (`::error title=…::…`), its title and message escaped as actions/toolkit does."""
    return f"::{kind} title={_escape_property(title)}::{_escape_data(message)}"


def annotations(comp: Comparison) -> list[str]:
    """One workflow command per failing check (error) and per warning: cell and position in every one."""
    from mtpbench.render.words import cause_text, check_message, finding_message
    from mtpbench.render.words.units import enum_text

    out: list[str] = []
    for x in comp.checks:
        verdict = enum_text(x.verdict)
        if verdict == "regression":
            where = f"{x.cell} pos{x.pos}"
            out.append(workflow_command("error", f"mtpbench regression: {where}", f"{where}: {check_message(x)}"))
    for d in comp.diagnoses:
        kind, sev = d.name, enum_text(d.severity)
        if kind == "regression":
            continue  # already one annotation per position above
        pos = getattr(d.payload, "pos", None)  # the one position a divergence / instability names
        where = d.cell + (f" pos{pos}" if pos is not None else "")
        cause = cause_text(d)
        text = f"{where}: {finding_message(d)}" + (f" (likely cause: {cause})" if cause else "")
        if sev == "fail":
            out.append(workflow_command("error", f"mtpbench {kind}: {where}", text))
        elif sev == "warn":
            out.append(workflow_command("warning", f"mtpbench {kind}: {where}", text))
    return out


def publish(comp: Comparison, markdown: str, env: Mapping[str, str] = os.environ) -> tuple[list[str], str | None]:
    """Append the Markdown verdict to $GITHUB_STEP_SUMMARY; return the annotation lines for stdout and a
    note when there was no summary file to write."""
    note = None
    summary = env.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with Path(summary).open("a", encoding="utf-8") as f:
                f.write(markdown if markdown.endswith("\n") else markdown + "\n")
        except OSError as exc:
            note = f"cannot write GITHUB_STEP_SUMMARY {summary}: {exc}"
    else:
        note = "GITHUB_STEP_SUMMARY is not set: no step summary written"
    return annotations(comp), note
