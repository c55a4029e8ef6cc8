"""Rendering: rich tables, JSON, Markdown and JUnit XML of summaries and comparisons. No arithmetic
beyond turning fractions into the percentages people read; every figure comes from stats/compare."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from mtpbench.compare import FAIL, INFO, WARN, CellResult, Comparison, Diagnosis, PositionCheck
from mtpbench.stats import Interval

STYLE = {FAIL: "bold red", WARN: "yellow", INFO: "cyan"}
VERDICT_STYLE = {"regression": "bold red", "improvement": "cyan", "pass": "green"}


def pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}"


def ci_text(ci: Interval | None) -> str:
    return "" if ci is None else f"[{100 * ci.low:.1f},{100 * ci.high:.1f}]"


def pts(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f}"


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


def summary_table(cells: list[CellResult], title: str = "", ci: bool = True) -> Table:
    """One row per cell; the graph mode, drafts and 95 % intervals sit on a dim second line so the table
    fits an 80-column terminal."""
    k = max((c.summary.counts.k for c in cells), default=0)
    t = Table(
        title=title or None,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        collapse_padding=True,
    )
    t.add_column("cell\ngraph mode", min_width=20)
    t.add_column("rep\ndrafts", justify="right", no_wrap=True)
    for i in range(k):
        t.add_column(f"pos{i} %\n[95% CI]" if ci else f"pos{i} %", justify="right", no_wrap=True)
    t.add_column("mean\n%", justify="right", no_wrap=True)
    t.add_column("avg\nacc", justify="right", no_wrap=True)
    t.add_column("AL", justify="right", no_wrap=True)
    t.add_column("spread\npts", justify="right", no_wrap=True)
    for c in cells:
        s = c.summary
        spread = [x for x in s.spread if x is not None]
        done = sum(1 for st in c.statuses if st == "ok")
        name = Text(c.cell)
        name.append("\n" + _mode_text(c), style="dim")
        rep = Text(f"{done}/{len(c.statuses)}", style="" if c.complete else "red")
        rep.append(f"\n{s.counts.num_drafts}", style="dim")
        row: list[Any] = [name, rep]
        for i in range(k):
            txt = Text(pct(s.per_pos[i]) if i < s.counts.k else "")
            if ci and i < s.counts.k and s.per_pos_ci[i] is not None:
                txt.append("\n" + ci_text(s.per_pos_ci[i]), style="dim")
            row.append(txt)
        row += [
            pct(s.mean),
            "–" if s.avg_accepted is None else f"{s.avg_accepted:.2f}",
            "–" if s.acceptance_length is None else f"{s.acceptance_length:.2f}",
            f"{100 * max(spread):.1f}" if spread else "–",
        ]
        t.add_row(*row)
    return t


def checks_table(checks: list[PositionCheck], baseline: str | None) -> Table:
    t = Table(title=f"against baseline {baseline}" if baseline else None, title_justify="left")
    t.add_column("cell", no_wrap=True)
    for col in ("pos", "run %", "baseline %"):
        t.add_column(col, justify="right")
    t.add_column("Δ pts", justify="right")
    t.add_column("Δ 95% CI", justify="right")
    t.add_column("verdict")
    for x in checks:
        t.add_row(
            x.cell,
            str(x.pos),
            pct(x.run_rate),
            pct(x.base_rate),
            pts(x.delta),
            ci_text(x.ci),
            Text(x.verdict, style=VERDICT_STYLE.get(x.verdict, "")),
        )
    return t


def diagnosis_text(d: Diagnosis) -> Text:
    t = Text()
    t.append(f"{d.severity.upper():4} ", style=STYLE.get(d.severity, ""))
    t.append(f"{d.kind} ", style="bold")
    t.append(f"{d.cell}: {d.message}")
    if d.cause:
        t.append(f"\n       likely cause: {d.cause}", style="dim")
    return t


def verdict_line(comp: Comparison) -> Text:
    code = int(comp.exit_code)
    fails = [d for d in comp.diagnoses if d.severity == FAIL]
    if code == 0:
        return Text(f"PASS: {len(comp.cells)} cells, no regression or bug signature (exit 0)", style="bold green")
    if code == 1:
        kinds = sorted({d.kind for d in fails})
        return Text(f"FAIL: {', '.join(kinds)} in {len({d.cell for d in fails})} cell(s) (exit 1)", style="bold red")
    return Text("INCOMPLETE: some cells did not finish; figures cover what did (exit 3)", style="bold yellow")


def comparison_renderable(comp: Comparison, show_checks: bool = True, ci: bool = True) -> Group:
    parts: list[Any] = [summary_table(comp.cells, title=f"run {comp.run_id}", ci=ci)]
    if comp.baseline and show_checks:
        parts.append(checks_table(comp.checks, comp.baseline))
        prov = comp.baseline_provenance
        if prov:
            src, date = prov.get("source"), prov.get("date", "undated")
            parts.append(Text(f"baseline provenance: {src} ({date})", style="dim"))
        if comp.unchecked:
            parts.append(Text(f"not checked (baseline lacks them): {', '.join(comp.unchecked)}", style="dim"))
    parts.extend(diagnosis_text(d) for d in comp.diagnoses)
    parts.append(verdict_line(comp))
    return Group(*parts)


# --- machine-readable ---------------------------------------------------------------------------------


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        if hasattr(obj, "spread"):
            out["spread"] = _jsonable(obj.spread)
        return out
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    return obj


def comparison_json(comp: Comparison) -> str:
    data = _jsonable(comp)
    data["exit_code"] = int(comp.exit_code)
    return json.dumps(data, indent=2)


def comparison_markdown(comp: Comparison) -> str:
    k = max((c.summary.counts.k for c in comp.cells), default=0)
    lines = [f"### mtpbench: run `{comp.run_id}`" + (f" vs `{comp.baseline}`" if comp.baseline else ""), ""]
    lines.append(str(verdict_line(comp)))
    lines.append("")
    head = ["cell", "graph", *[f"pos{i} %" for i in range(k)], "mean %", "avg acc", "AL", "spread pts"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in comp.cells:
        s = c.summary
        spread = [x for x in s.spread if x is not None]
        row = [f"`{c.cell}`", _mode_text(c), *[pct(s.per_pos[i]) for i in range(s.counts.k)]]
        row += [
            pct(s.mean),
            "–" if s.avg_accepted is None else f"{s.avg_accepted:.2f}",
            "–" if s.acceptance_length is None else f"{s.acceptance_length:.2f}",
            f"{100 * max(spread):.1f}" if spread else "–",
        ]
        lines.append("| " + " | ".join(row) + " |")
    if comp.baseline:
        lines += ["", "| cell | pos | run % | baseline % | Δ pts | verdict |", "|---|---|---|---|---|---|"]
        for x in comp.checks:
            lines.append(
                f"| `{x.cell}` | {x.pos} | {pct(x.run_rate)} | {pct(x.base_rate)} | {pts(x.delta)} | {x.verdict} |"
            )
    if comp.diagnoses:
        lines.append("")
        for d in comp.diagnoses:
            cause = f" — likely cause: {d.cause}" if d.cause else ""
            lines.append(f"- **{d.severity.upper()} {d.kind}** `{d.cell}`: {d.message}{cause}")
    return "\n".join(lines) + "\n"


def comparison_junit(comp: Comparison) -> str:
    suite = ET.Element("testsuite", name=f"mtpbench.{comp.run_id}")
    n = failures = 0
    for x in comp.checks:
        n += 1
        case = ET.SubElement(suite, "testcase", classname=f"mtpbench.{x.cell}", name=f"pos{x.pos}")
        if x.verdict == "regression":
            failures += 1
            ET.SubElement(case, "failure", message=x.message, type="regression")
        elif x.verdict in ("no-baseline", "no-data"):
            ET.SubElement(case, "skipped", message=x.message)
        elif x.verdict == "improvement":
            ET.SubElement(case, "system-out").text = x.message
    for kind in ("cross-process-instability", "graph-divergence"):
        for c in comp.cells:
            n += 1
            case = ET.SubElement(suite, "testcase", classname=f"mtpbench.{c.cell}", name=kind)
            for d in comp.diagnoses:
                if d.kind == kind and d.cell == c.cell:
                    failures += 1
                    ET.SubElement(case, "failure", message=d.message, type=kind).text = d.cause
    suite.set("tests", str(n))
    suite.set("failures", str(failures))
    # Jenkins' JUnit schema requires `errors` (tests/data/junit-jenkins.xsd); a gate check never errors.
    suite.set("errors", "0")
    suite.set("skipped", str(len(suite.findall("testcase/skipped"))))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
