"""Rendering a comparison: rich tables, the JSON document, Markdown and the verdict line (JUnit is junit.py).

The sentences (what each finding says, its likely cause, what a pass certifies) live in words/; this module
lays them out. One row builder per table (`summary_rows`, `length_rows`, `check_rows`) feeds the rich table,
the Markdown and the HTML page, so they never disagree; the verdict line, the JSON's `exit_code` and the JUnit
failures all derive from `Comparison.exit_code`. No arithmetic beyond turning fractions into the percentages
people read.
"""

from __future__ import annotations

import dataclasses
import json
import math
from enum import Enum
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from mtpbench import __version__
from mtpbench.errors import ExitCode, NotComparableError
from mtpbench.judge.checks import LengthCheck, PositionCheck
from mtpbench.judge.compare import Comparison
from mtpbench.judge.evidence import CellResult
from mtpbench.judge.figdata import BuildsView
from mtpbench.judge.findings import Finding, Severity, Verdict
from mtpbench.judge.findings.context import ContextTable
from mtpbench.judge.signals.per_request import CellHistogram
from mtpbench.render.referencereport import reference_rows, reference_section
from mtpbench.render.rounds import COLUMN as ROUNDS_COLUMN
from mtpbench.render.rounds import rounds_cell, rounds_document
from mtpbench.render.words import cause_text, finding_head, finding_message, severity_word, verdict_text
from mtpbench.render.words.builds import BUILDS_TITLE, builds_outcome, builds_summary
from mtpbench.render.words.context import BUCKET_HEADERS, bucket_cells
from mtpbench.render.words.context import TABLE_TITLE as CONTEXT_TITLE
from mtpbench.render.words.per_request import HISTOGRAM_NOTE, HISTOGRAM_TITLE, source_text
from mtpbench.render.words.positions import DEFINITIONS, POSITIONS_NOTE, conditional_title, unconditional_title
from mtpbench.render.words.reference import reference_title
from mtpbench.render.words.units import ci_text, pct, pts
from mtpbench.render.words.verdict import EXPECTED_FAIL
from mtpbench.schema import COUNTERS_ONLY

# Version of the JSON document `--json` writes. History: 1: cells/checks/diagnoses with free-text messages;
# 2: adds schema, verdict, findings (kind/severity/cause/numbers/message), MDE.
REPORT_SCHEMA = 2

STYLE = {Severity.FAIL: "bold red", Severity.WARN: "yellow", Severity.INFO: "cyan"}
VERDICT_STYLE = {
    Verdict.REGRESSION: "bold red",
    Verdict.INCONCLUSIVE: "bold yellow",
    Verdict.IMPROVEMENT: "cyan",
    Verdict.PASS: "green",
    Verdict.NO_BASELINE: "red",
    Verdict.NO_DATA: "red",
}
VERDICT_WORD = {
    ExitCode.OK: "PASS",
    ExitCode.REGRESSION: "FAIL",
    ExitCode.RUN_FAILED: "INCOMPLETE",
    ExitCode.NOT_COMPARABLE: "NOT COMPARABLE",
    ExitCode.INCONCLUSIVE: "INCONCLUSIVE",
    ExitCode.USAGE: "ERROR",
}


def _mode_text(c: CellResult) -> str:
    eff = c.effective.get("cudagraph_mode") or "?"
    req = c.requested.get("cudagraph_mode")
    s = eff if not req or req == eff else f"{req}→{eff}"
    comp = c.effective.get("compilation_mode")
    if c.effective.get("enforce_eager"):
        s += " eager"
    elif comp and comp != "NONE":
        s += " compiled"
    return s


# --- the one row builder per table ------------------------------------------------------------------

# A table cell: (main text, detail on a dim second line or "", style of the main text).
Cell = tuple[str, str, str]
Column = tuple[str, str, str]  # (title, subtitle, justify)


def summary_rows(cells: list[CellResult], ci: bool = True) -> tuple[list[Column], list[list[Cell]]]:
    k = max((c.evidence.k for c in cells), default=0)
    cols: list[Column] = [("cell", "graph mode", "left"), ("rep", "drafts", "right"), ("prompts", "", "right")]
    # Both per-position definitions side by side (words/positions.py): unconditional with its interval,
    # then conditional from pos1 on (at pos0 it is the unconditional figure).
    cols += [(unconditional_title(i), "[95% CI]" if ci else "", "right") for i in range(k)]
    cols += [(conditional_title(i), "", "right") for i in range(1, k)]
    cols += [
        ("mean", "%", "right"),
        ("avg", "acc", "right"),
        ("AL", "pooled", "right"),
        ("AL", "per req", "right"),
        ("spread", "pts", "right"),
    ]
    soak = any(c.rounds is not None for c in cells)  # a soak run: mean acceptance per round of one engine
    cols += [ROUNDS_COLUMN] if soak else []
    rows: list[list[Cell]] = []
    for c in cells:
        s = c.summary
        spread = [x for x in s.spread if x is not None]
        row: list[Cell] = [
            (c.cell, _mode_text(c), ""),
            (f"{c.repeats_done}/{len(c.repeats)}", str(s.counts.num_drafts), "" if c.complete else "red"),
            (f"{s.prompts}/{c.prompts_expected}" if c.prompts_expected else str(s.prompts), "", ""),
        ]
        for i in range(k):
            has = i < len(s.per_pos)
            row.append((pct(s.per_pos[i]) if has else "", ci_text(s.per_pos_ci[i]) if ci and has else "", ""))
        for i in range(1, k):
            row.append((pct(s.conditional[i]) if i < len(s.conditional) else "", "", ""))
        row += [
            (pct(s.mean), "", ""),
            ("–" if s.avg_accepted is None else f"{s.avg_accepted:.2f}", "", ""),
            ("–" if s.acceptance_length is None else f"{s.acceptance_length:.2f}", "", ""),
            ("–" if s.request_al is None else f"{s.request_al:.2f}", "", ""),
            (f"{100 * max(spread):.1f}" if spread else "–", "", ""),
        ] + ([rounds_cell(c)] if soak else [])
        rows.append(row)
    return cols, rows


def check_rows(checks: list[PositionCheck], ci: bool = True) -> tuple[list[Column], list[list[Cell]]]:
    """One row per cell × position; `ci` adds the interval and prompt columns (they need ~100 columns)."""
    cols: list[Column] = [
        ("cell", "", "left"),
        ("pos", "", "right"),
        ("run", "%", "right"),
        ("base", "%", "right"),
        ("Δ", "pts", "right"),
    ]
    if ci:
        cols += [("Δ 95% CI", "pts", "right"), ("prompts", "", "right")]
    cols += [("MDE", "pts", "right"), ("verdict", "", "left")]
    rows: list[list[Cell]] = []
    for x in checks:
        weak = x.underpowered and x.verdict == Verdict.PASS
        note = f" ({COUNTERS_ONLY})" if x.method == COUNTERS_ONLY else " (underpowered)" if weak else ""
        row: list[Cell] = [
            (x.cell, "", ""),
            (str(x.pos), "", ""),
            (pct(x.run_rate), "", ""),
            (pct(x.base_rate), "", ""),
            (pts(x.delta), "", ""),
        ]
        if ci:
            pooled = x.method == COUNTERS_ONLY  # one /metrics count per repeat: no prompts, no interval
            row += [
                (ci_text(x.ci), "", ""),
                (COUNTERS_ONLY if pooled else str(x.prompts) if x.prompts else "–", "", ""),
            ]
        row += [
            ("–" if x.mde is None else f"{100 * x.mde:.1f}", "", "yellow" if weak else ""),
            (x.verdict.value + note, "", VERDICT_STYLE.get(x.verdict, "")),
        ]
        rows.append(row)
    return cols, rows


def _tok(x: float | None, sign: bool = False) -> str:
    return "–" if x is None else f"{x:+.3f}" if sign else f"{x:.3f}"


def length_rows(lengths: list[LengthCheck], primary: bool, ci: bool = True) -> tuple[list[Column], list[list[Cell]]]:
    """One row per cell: AL of the run and of its baseline entry, Δ, its interval, δ and the MDE (tokens per
    draft step); the verdict says whether it is the gate's primary endpoint or a diagnosis."""
    cols: list[Column] = [
        ("cell", "", "left"),
        ("AL run", "tok", "right"),
        ("AL base", "tok", "right"),
        ("Δ", "tok", "right"),
    ]
    if ci:
        cols += [("Δ CI", "tok", "right"), ("prompts", "", "right")]
    cols += [("δ", "tok", "right"), ("MDE", "tok", "right"), ("verdict", "", "left")]
    rows: list[list[Cell]] = []
    for x in lengths:
        weak = x.underpowered and x.verdict == Verdict.PASS
        note = f" ({COUNTERS_ONLY})" if x.method == COUNTERS_ONLY else " (underpowered)" if weak else ""
        role = "" if primary else " (diagnosis)"
        row: list[Cell] = [
            (x.cell, "", ""),
            (_tok(x.run_al), "", ""),
            (_tok(x.base_al), "", ""),
            (_tok(x.delta, True), "", ""),
        ]
        if ci:
            span = "" if x.ci is None else f"[{x.ci.low:+.3f},{x.ci.high:+.3f}]"
            row += [(span, "", ""), (str(x.prompts) if x.prompts else "–", "", "")]
        row += [
            (_tok(x.tolerance), "", ""),
            (_tok(x.mde), "", "yellow" if weak else ""),
            (x.verdict.value + note + role, "", VERDICT_STYLE.get(x.verdict, "")),
        ]
        rows.append(row)
    return cols, rows


def histogram_rows(hists: list[CellHistogram]) -> tuple[list[Column], list[list[Cell]]]:
    """Per cell, its verify steps by drafts accepted (vLLM's per-request acceptance_histogram, pooled over
    its requests) as % of its steps, beside where the counts came from (judge/signals/per_request.py)."""
    k = max((len(h.histogram) - 1 for h in hists), default=0)
    cols: list[Column] = [("cell", "", "left"), ("from", "", "left"), ("requests", "", "right")]
    cols += [("steps", "", "right")] + [(f"accepted {j}", "% of steps", "right") for j in range(k + 1)]
    rows: list[list[Cell]] = []
    for h in hists:
        steps = h.num_spec_steps
        row: list[Cell] = [(h.cell, "", ""), (source_text(h.source), "", ""), (str(len(h.requests)), "", "")]
        row.append((str(steps), "", ""))
        for j in range(k + 1):
            has = j < len(h.histogram) and steps > 0
            row.append((pct(h.histogram[j] / steps) if has else "–", "", ""))
        rows.append(row)
    return cols, rows


def context_rows(tables: list[ContextTable]) -> tuple[list[Column], list[list[Cell]]]:
    """A context sweep's acceptance per bucket (judge/signals/context.py), one row per cell × bucket."""
    cols: list[Column] = [(h, "", "left" if i == 0 else "right") for i, h in enumerate(BUCKET_HEADERS)]
    rows = [[(text, "", "") for text in bucket_cells(t.cell, b)] for t in tables for b in t.buckets]
    return cols, rows


def builds_rows(bv: BuildsView) -> tuple[list[Column], list[list[Cell]]]:
    """The builds × positions table (judge/signals/builds.py's builds_table): per mode/variant and build, each
    position's acceptance with its gap to the reference build, the AL and the build-divergence finding."""
    cols: list[Column] = [("mode/variant", "", "left"), ("build", "", "left")]
    cols += [(f"pos{i} %", "(Δ pts)", "right") for i in range(bv.k)]
    cols += [("AL", "pooled", "right"), ("build-divergence", "", "left")]
    rows: list[list[Cell]] = []
    for gi, group in enumerate(bv.groups):
        for bi, build in enumerate(bv.builds):
            flag = bv.flagged[gi][bi]
            ref = " (reference)" if build == bv.reference_build else ""
            row: list[Cell] = [(group, "", ""), (build + ref, "", "")]
            for i in range(bv.k):
                delta = bv.deltas[gi][bi][i]
                row.append((pct(bv.rates[gi][bi][i]), "" if delta is None else f"({pts(delta)})", ""))
            al = bv.al[gi][bi]
            style = "bold red" if flag == "fail" else "bold yellow" if flag == "inconclusive" else ""
            row += [("–" if al is None else f"{al:.2f}", "", ""), (flag or "none", "", style)]
            rows.append(row)
    return cols, rows


def builds_document(bv: BuildsView, tolerance_pts: float) -> dict[str, Any]:
    """The JSON's `builds` section: the outcome, its sentence and the table, one row per mode/variant × build."""
    return {
        "reference_build": bv.reference_build,
        "builds": bv.builds,
        "divergence": builds_outcome(bv),
        "summary": builds_summary(bv, tolerance_pts),
        "rows": [
            {
                "group": group,
                "build": build,
                "reference": build == bv.reference_build,
                "per_pos": _jsonable(bv.rates[gi][bi]),
                "delta_vs_reference": _jsonable(bv.deltas[gi][bi]),
                "acceptance_length": _jsonable(bv.al[gi][bi]),
                "build_divergence": bv.flagged[gi][bi] or "none",
            }
            for gi, group in enumerate(bv.groups)
            for bi, build in enumerate(bv.builds)
        ],
    }


def rich_table(cols: list[Column], rows: list[list[Cell]], title: str = "", caption: str = "") -> Table:
    t = Table(
        title=title or None,
        title_justify="left",
        caption=caption or None,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        collapse_padding=True,
    )
    for i, (name, sub, justify) in enumerate(cols):
        t.add_column(
            f"{name}\n{sub}" if sub else name,
            justify=justify,  # type: ignore[arg-type]
            no_wrap=i > 0,
            min_width=20 if i == 0 else None,
        )
    for row in rows:
        cells = []
        for main, detail, style in row:
            txt = Text(main, style=style)
            if detail:
                txt.append("\n" + detail, style="dim")
            cells.append(txt)
        t.add_row(*cells)
    return t


def markdown_table(cols: list[Column], rows: list[list[Cell]]) -> list[str]:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    head = [esc(f"{n} {s}".strip()) if s and not s.startswith("[") else esc(n) for n, s, _ in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "".join("---|" if j == "left" else "--:|" for _, _, j in cols)]
    for row in rows:
        out = []
        for i, (main, detail, _) in enumerate(row):
            text = f"`{main}`" if i == 0 else main
            out.append(esc(f"{text} {detail}".strip()))
        lines.append("| " + " | ".join(out) + " |")
    return lines


def summary_table(cells: list[CellResult], title: str = "", ci: bool = True) -> Table:
    cols, rows = summary_rows(cells, ci)
    return rich_table(cols, rows, title, caption=POSITIONS_NOTE)


def checks_table(checks: list[PositionCheck], baseline: str | None, ci: bool = True) -> Table:
    cols, rows = check_rows(checks, ci)
    return rich_table(cols, rows, f"against baseline {baseline}" if baseline else "")


def diagnosis_text(d: Finding, expected: bool = False) -> Text:
    """One finding; `expected`: a FAIL the caller injected on purpose (the selftest's fault), labelled so."""
    t = Text()
    word = severity_word(d)
    t.append(f"{word:4} ", style="bold yellow" if word == "INCONCLUSIVE" else STYLE.get(d.severity, ""))
    if expected and d.severity == Severity.FAIL:
        t.append(f"{EXPECTED_FAIL} ", style="bold")
    if d.name != word.lower():
        t.append(f"{d.name} ", style="bold")
    t.append(f"{d.cell}: {finding_message(d)}")
    if cause_text(d):
        t.append(f"\n       likely cause: {cause_text(d)}", style="dim")
    return t


def verdict_line(comp: Comparison, expected: frozenset[str] = frozenset()) -> Text:
    style = {ExitCode.OK: "bold green", ExitCode.REGRESSION: "bold red"}.get(comp.exit_code, "bold yellow")
    fails = {d.cell for d in comp.diagnoses if d.severity == Severity.FAIL}
    if fails and fails <= expected:  # every failing cell is one the caller injected a fault into
        return Text(f"{EXPECTED_FAIL} {verdict_text(comp)}", style="bold")
    return Text(verdict_text(comp), style=style)


def comparison_renderable(
    comp: Comparison, show_checks: bool = True, ci: bool = True, expected: frozenset[str] = frozenset()
) -> Group:
    """The console's comparison. `expected`: cells whose FAIL findings are expected (the selftest's injected
    fault), labelled as such so that a reader does not take the selftest's proof for a failure."""
    parts: list[Any] = [summary_table(comp.cells, title=f"run {comp.run_id}", ci=ci)]
    if comp.baseline and show_checks:
        if comp.lengths:
            primary = comp.gate.primary == "acceptance_length"
            parts.append(rich_table(*length_rows(comp.lengths, primary, ci), f"acceptance length vs {comp.baseline}"))
        parts.append(checks_table(comp.checks, comp.baseline, ci))
        prov = comp.baseline_provenance
        if prov:
            src, date = prov.get("source"), prov.get("date", "undated")
            parts.append(Text(f"baseline provenance: {src} ({date})", style="dim"))
    if comp.reference is not None:
        # A run replayed from the weights: each position's engine rate beside the reference's.
        parts.append(rich_table(*reference_rows(comp.reference), reference_title(comp.run_id)))
    if comp.context:
        parts.append(rich_table(*context_rows(comp.context), CONTEXT_TITLE))
    if comp.builds is not None:
        parts.append(rich_table(*builds_rows(comp.builds), BUILDS_TITLE))
        style = {"none": "green", "inconclusive": "bold yellow"}.get(builds_outcome(comp.builds), "bold red")
        parts.append(Text(builds_summary(comp.builds, comp.gate.divergence_pts), style=style))
    parts.extend(diagnosis_text(d, d.cell in expected) for d in comp.diagnoses)
    parts.append(verdict_line(comp, expected))
    return Group(*parts)


# --- machine-readable ---------------------------------------------------------------------------------

# Bulky or internal: not part of the document. (counters_only shows as each check's `method`.)
_SKIP = {"load_outputs", "evidence", "observations", "prompt_names", "counters_only", "rounds", "round_ends"}


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Enum):
        return obj.value
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # A field marked omit_none (a k sweep's cell k) is left out when unset: single-k documents stay as they were.
        out = {
            f.name: _jsonable(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.name not in _SKIP and not (f.metadata.get("omit_none") and getattr(obj, f.name) is None)
        }
        if hasattr(obj, "spread"):
            out["spread"] = _jsonable(obj.spread)
        return out
    if isinstance(obj, dict):
        return {str(k.value if isinstance(k, Enum) else k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, float):
        return None if math.isnan(obj) else round(obj, 6)
    if hasattr(obj, "item"):  # numpy scalars
        return _jsonable(obj.item())
    return obj


def comparison_document(comp: Comparison) -> dict[str, Any]:
    code = comp.exit_code
    return {
        "schema": REPORT_SCHEMA,
        "tool_version": __version__,
        "run_id": comp.run_id,
        "baseline": comp.baseline,
        "verdict": VERDICT_WORD[code].lower().replace(" ", "-"),
        "exit_code": int(code),
        "summary": verdict_text(comp),
        "gate": comp.gate.model_dump(mode="json"),
        "greedy": comp.greedy,
        "baseline_provenance": _jsonable(comp.baseline_provenance),
        "unchecked": comp.unchecked,
        "cells": _jsonable(comp.cells),
        # Which per-position figure is which in each cell's summary (vllm#39359).
        "per_pos_definitions": DEFINITIONS,
        "lengths": _jsonable(comp.lengths),
        "checks": _jsonable(comp.checks),
        **({"rounds": _jsonable(rounds_document(comp.cells))} if any(c.rounds is not None for c in comp.cells) else {}),
        **({"context": _jsonable(comp.context)} if comp.context else {}),
        # Per cell, vLLM's per-request shape pooled: verify steps by drafts accepted (judge/signals/per_request.py).
        **({"per_request": [h.document() for h in comp.per_request]} if comp.per_request else {}),
        **({"builds": builds_document(comp.builds, comp.gate.divergence_pts)} if comp.builds is not None else {}),
        "findings": [
            {
                "kind": f.name,
                "severity": f.severity.value,
                "cell": f.cell,
                "exit_code": int(f.exit_code),
                "message": finding_message(f),
                "cause": f.cause.value,
                "likely_cause": cause_text(f),
                "numbers": _jsonable(f.numbers),
            }
            for f in comp.diagnoses
        ],
        **({"metadata_binding": _jsonable(comp.binding)} if comp.binding else {}),
        # The reference's findings are in `findings` above; this is its per-cell, per-position table.
        **({"reference": _jsonable(reference_section(comp.reference))} if comp.reference is not None else {}),
    }


def comparison_json(comp: Comparison) -> str:
    return json.dumps(comparison_document(comp), indent=2, ensure_ascii=False)


def comparison_markdown(comp: Comparison) -> str:
    lines = [f"### mtpbench: run `{comp.run_id}`" + (f" vs `{comp.baseline}`" if comp.baseline else ""), ""]
    lines += [f"**{verdict_text(comp)}**", ""]
    lines += markdown_table(*summary_rows(comp.cells, ci=True))
    lines += ["", f"_{POSITIONS_NOTE}_"]
    if comp.baseline:
        if comp.lengths:
            lines += ["", *markdown_table(*length_rows(comp.lengths, comp.gate.primary == "acceptance_length"))]
        lines += ["", *markdown_table(*check_rows(comp.checks))]
    if comp.reference is not None:
        lines += ["", f"**{reference_title(comp.run_id)}**", "", *markdown_table(*reference_rows(comp.reference))]
    if comp.context:
        lines += ["", f"**{CONTEXT_TITLE}**", "", *markdown_table(*context_rows(comp.context))]
    if any(h.requests for h in comp.per_request):
        lines += ["", f"**{HISTOGRAM_TITLE}**", "", *markdown_table(*histogram_rows(comp.per_request))]
        lines += ["", f"_{HISTOGRAM_NOTE}_"]
    if comp.builds is not None:
        lines += ["", f"**{BUILDS_TITLE}**", "", *markdown_table(*builds_rows(comp.builds))]
        lines += ["", builds_summary(comp.builds, comp.gate.divergence_pts)]
    if comp.diagnoses:
        lines.append("")
        for d in comp.diagnoses:
            cause = f" — likely cause: {cause_text(d)}" if cause_text(d) else ""
            lines.append(f"- **{finding_head(d)}** `{d.cell}`: {finding_message(d)}{cause}")
    return "\n".join(lines) + "\n"


# --- not comparable: no comparison exists, but CI still reads a document -----------------------------


def not_comparable_document(exc: NotComparableError) -> dict[str, Any]:
    return {
        "schema": REPORT_SCHEMA,
        "tool_version": __version__,
        "run_id": exc.run_id,
        "baseline": exc.baseline,
        "verdict": "not-comparable",
        "exit_code": int(ExitCode.NOT_COMPARABLE),
        "summary": str(exc),
        "reasons": exc.reasons,
        "unchecked": exc.unchecked,
        "cells": [],
        "checks": [],
        "findings": [],
    }


def not_comparable_json(exc: NotComparableError) -> str:
    return json.dumps(not_comparable_document(exc), indent=2, ensure_ascii=False)
