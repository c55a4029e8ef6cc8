"""Rendering: every sentence and percentage a person or a CI reads — rich tables, JSON, Markdown, JUnit.

compare.py hands over structured findings (enums and numbers); this module words them. One row builder
per table (`summary_rows`, `check_rows`) feeds both the rich table and the Markdown, so the two never
disagree; the verdict line, the JSON's `exit_code` and the JUnit failures all derive from
`Comparison.exit_code`. No arithmetic beyond turning fractions into the percentages people read.
"""

from __future__ import annotations

import dataclasses
import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable
from enum import Enum
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from mtpbench import __version__
from mtpbench.errors import ExitCode, NotComparableError
from mtpbench.fixes.status import is_fix
from mtpbench.judge.compare import Cause, CellResult, Comparison, Finding, Kind, PositionCheck, Severity, Verdict
from mtpbench.judge.findings import (
    CountMismatch,
    Divergence,
    Downgraded,
    FailedRequests,
    Instability,
    NoBaseline,
    PatchNotApplied,
    PositionChecks,
    RunFailed,
    SpeculationOff,
    TextChanged,
    ThroughputDrop,
    Unchecked,
)
from mtpbench.judge.serving_summary import COUNTERS_ONLY_METHOD
from mtpbench.judge.stats import Interval
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

CAUSE_TEXT: dict[Cause, str] = {
    Cause.NONE: "",
    Cause.DRAFTER_ACCEPTANCE: "the drafter's tokens are accepted less often than the baseline's on the same prompts",
    Cause.SPECULATION_DISABLED: "speculative decoding did not run: the speculative config was dropped, the "
    "proposer fell back, or the spec-decode metrics were not read",
    Cause.ORDER_DEPENDENT_STATE: "order-dependent state: something iterated from a set/dict (hash-seed dependent) "
    "decides what the draft reads, e.g. which KV-cache group's attention metadata the draft layers are bound to",
    Cause.TARGET_NONDETERMINISM: "the target's output itself differs between processes: non-deterministic kernels "
    "or order-dependent state on the target's side",
    Cause.DRAFT_GRAPH_METADATA: "draft-side state that only graph/compiled replay uses: per-layer draft attention "
    "metadata flattened to one layer, or graph parameter updates not resolved per layer / KV-cache group",
    Cause.TARGET_NUMERICS: "the target's numerics changed (kernels, graphs, dtype), not only the drafter",
    Cause.STALE_BASELINE: "the baseline may be stale: re-record it if the improvement is intended",
    Cause.NO_PER_REQUEST_COUNTS: "the build returned no per-request spec-decode counts (vLLM before PR #48915), so "
    "only the /metrics deltas pooled over the load were measured: a build with --per-request-spec-decode-metrics "
    "gives an interval",
    Cause.TOO_LITTLE_EVIDENCE: "too few prompts to rule out a drop of the gate's size or to confirm one: add "
    "prompts (identical greedy repeats count once, so more repeats do not help)",
    Cause.NO_BASELINE_ENTRY: "a build or mode was renamed, or the baseline predates it",
    Cause.INCOMPLETE_REPEATS: "an engine crashed, timed out or was interrupted: see the run's logs/",
    Cause.PLATFORM_DOWNGRADE: "the platform has no such graph mode and vLLM ran NONE instead",
    Cause.UNVERIFIED_IDENTITY: "the baseline does not record these fields, so it cannot tell whether it describes "
    "this model, drafter and prompt set",
    Cause.REQUESTS_FAILED: "the server failed requests under load: any failed request fails the gate",
    Cause.COUNTERS_DISAGREE: "something else used the server during the load, or a build whose per-request "
    "metrics count differently from its Prometheus counters",
    Cause.SLOWER_SERVING: "slower serving; hardware and load differ between machines, so this fails only with "
    "workload.fail_on_throughput_drop",
    Cause.PATCH_REFUSED: "the patch refused this build (it lacks the code the patch targets, or already behaves "
    "as fixed): the variant ran unpatched",
    Cause.PATCH_RAISED: "the patch raised while applying: the variant's measurement is broken",
}


def pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}"


def ci_text(ci: Interval | None) -> str:
    return "" if ci is None else f"[{100 * ci.low:.1f},{100 * ci.high:.1f}]"


def pts(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f}"


def _ci_list(ci: list[float] | None) -> str:
    if ci is None:
        return "no interval (fewer than 2 prompts with drafts)"
    return f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


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
    cols += [(f"pos{i} %", "[95% CI]" if ci else "", "right") for i in range(k)]
    cols += [("mean", "%", "right"), ("avg", "acc", "right"), ("AL", "", "right"), ("spread", "pts", "right")]
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
        row += [
            (pct(s.mean), "", ""),
            ("–" if s.avg_accepted is None else f"{s.avg_accepted:.2f}", "", ""),
            ("–" if s.acceptance_length is None else f"{s.acceptance_length:.2f}", "", ""),
            (f"{100 * max(spread):.1f}" if spread else "–", "", ""),
        ]
        rows.append(row)
    return cols, rows


def check_rows(checks: list[PositionCheck], ci: bool = True) -> tuple[list[Column], list[list[Cell]]]:
    """One row per cell × position; `ci` adds the interval and prompt columns (they need ~100 columns)."""
    cols: list[Column] = [("cell", "", "left"), ("pos", "", "right"), ("run", "%", "right"),
                          ("base", "%", "right"), ("Δ", "pts", "right")]  # fmt: skip
    if ci:
        cols += [("Δ 95% CI", "pts", "right"), ("prompts", "", "right")]
    cols += [("MDE", "pts", "right"), ("verdict", "", "left")]
    rows: list[list[Cell]] = []
    for x in checks:
        weak = x.underpowered and x.verdict == Verdict.PASS
        note = f" ({COUNTERS_ONLY})" if x.method == COUNTERS_ONLY else " (underpowered)" if weak else ""
        row: list[Cell] = [(x.cell, "", ""), (str(x.pos), "", ""), (pct(x.run_rate), "", ""),
                           (pct(x.base_rate), "", ""), (pts(x.delta), "", "")]  # fmt: skip
        if ci:
            pooled = x.method == COUNTERS_ONLY  # one /metrics count per repeat: no prompts, no interval
            row += [(ci_text(x.ci), "", ""), (COUNTERS_ONLY if pooled else str(x.prompts) if x.prompts else "–",
                                              "", "")]  # fmt: skip
        row += [
            ("–" if x.mde is None else f"{100 * x.mde:.1f}", "", "yellow" if weak else ""),
            (x.verdict.value + note, "", VERDICT_STYLE.get(x.verdict, "")),
        ]
        rows.append(row)
    return cols, rows


def rich_table(cols: list[Column], rows: list[list[Cell]], title: str = "") -> Table:
    t = Table(title=title or None, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
              collapse_padding=True)  # fmt: skip
    for i, (name, sub, justify) in enumerate(cols):
        t.add_column(f"{name}\n{sub}" if sub else name, justify=justify,  # type: ignore[arg-type]
                     no_wrap=i > 0, min_width=20 if i == 0 else None)  # fmt: skip
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
    return rich_table(cols, rows, title)


def checks_table(checks: list[PositionCheck], baseline: str | None, ci: bool = True) -> Table:
    cols, rows = check_rows(checks, ci)
    return rich_table(cols, rows, f"against baseline {baseline}" if baseline else "")


# --- findings in words --------------------------------------------------------------------------------


def _seeds(per_seed: dict[str, float]) -> str:
    return ", ".join(f"PYTHONHASHSEED={s}: {100 * r:.1f} %" for s, r in per_seed.items())


def _positions(n: PositionChecks, with_ci: bool = True) -> str:
    parts = []
    for j, pos in enumerate(n.positions):
        s = f"pos{pos} {pct(n.run_rates[j])} % vs baseline {pct(n.base_rates[j])} % ({pts(n.deltas[j])} pts"
        if with_ci:
            s += f", {100 * n.confidence:g} % CI {_ci_list(n.cis[j])}"
        parts.append(s + ")")
    return "; ".join(parts)


def _mdes(n: PositionChecks) -> str:
    return ", ".join(f"pos{p} {'n/a' if m is None else f'{100 * m:.1f}'}" for p, m in zip(n.positions, n.mdes,
                                                                                        strict=True))  # fmt: skip


# The method, and what it means for a verdict (compare._counters_only_check).
COUNTERS_ONLY_TEXT = (
    f"{COUNTERS_ONLY_METHOD} (the build returned no per-request counts): no interval, the point estimate decides"
)


def _msg_regression(n: PositionChecks) -> str:
    if n.method == COUNTERS_ONLY:
        return (f"{_positions(n, with_ci=False)}; tolerance {n.tolerance_pts:g} pts, entry {n.entry}; "
                f"{COUNTERS_ONLY_TEXT}")  # fmt: skip
    return f"{_positions(n)}; tolerance {n.tolerance_pts:g} pts, {n.prompts} prompts, entry {n.entry}"


def _msg_inconclusive(n: PositionChecks | Divergence) -> str:
    if isinstance(n, Divergence):
        return (
            f"{n.mode} differs from {n.reference_mode} by {pts(n.delta)} pts at pos{n.pos}, beyond the "
            f"{n.tolerance_pts:g}-pt divergence tolerance, but the data cannot support it (CI "
            f"{_ci_list(n.ci)}, {n.prompts} prompts)"
        )
    return (
        f"{_positions(n)}: the data neither rule out a drop of {n.tolerance_pts:g} pts nor confirm one "
        f"({n.prompts} prompts; the smallest drop this run catches with {100 * n.power:g} % power: {_mdes(n)} pts)"
    )


def _msg_underpowered(n: PositionChecks) -> str:
    if n.method == COUNTERS_ONLY:
        return (f"{_positions(n, with_ci=False)}: within the {n.tolerance_pts:g}-pt tolerance, but the power to "
                f"detect a drop that large is unknown; {COUNTERS_ONLY_TEXT}")  # fmt: skip
    return (
        f"could not have caught a drop of {n.tolerance_pts:g} pts with {100 * n.power:g} % power: smallest such "
        f"drop {_mdes(n)} pts ({n.prompts} prompts)"
    )


def _msg_improvement(n: PositionChecks) -> str:
    return f"{_positions(n, with_ci=False)}: better than the baseline beyond the {n.tolerance_pts:g}-pt tolerance"


def _msg_speculation_off(n: SpeculationOff) -> str:
    seeds = ", ".join(f"PYTHONHASHSEED={s}" for s in n.hash_seeds)
    where = f"every complete repeat ({seeds})" if n.all else f"repeats {seeds} of {n.repeats}"
    return f"zero drafts recorded in {where}: speculative decoding did not run"


def _msg_no_baseline(n: NoBaseline) -> str:
    return (
        f"baseline {n.baseline} has no entry for {n.build}/{n.mode} (entries: {', '.join(n.entries)}); "
        "name one with `baseline_entry:` in the config, add a `mode: \"*\"` entry for the build, or pass "
        "--allow-unmatched"
    )


def _msg_run_failed(n: RunFailed) -> str:
    if not n.excluded:
        return "the run did not finish"
    parts = [f"r{e.repeat} (PYTHONHASHSEED={e.hash_seed}) {e.status}, {e.prompts}/{e.expected} prompts"
             for e in n.excluded]  # fmt: skip
    return (
        f"{len(n.excluded)} of {n.repeats} repeats left out of every verdict: {'; '.join(parts)}; "
        f"verdicts use the {n.used} complete one(s)"
    )


def _msg_instability(n: Instability) -> str:
    head = (
        f"greedy repeats disagree on {n.prompts_differing} of {n.prompts} prompts (exact comparison of counts "
        "and output per prompt)"
        if n.method == "exact"
        else f"repeats differ beyond prompt-level sampling noise (permutation test over {n.prompts} prompts, "
        f"p={n.pvalue:.2g})"
    )
    text = ""
    if n.method == "exact":
        text = (
            "; generated text identical across repeats, so the drafter's inputs, not the target, vary"
            if n.same_text
            else "; generated text also differs across repeats"
        )
    return f"{head}; pos{n.pos}: {_seeds(n.per_seed)} (spread {100 * n.spread:.1f} pts){text}"


def _msg_divergence(n: Divergence) -> str:
    graphs = n.effective_cudagraph_mode not in (None, "NONE")
    what = "graph mode" if graphs else "compiled mode"
    note = "" if graphs else f" (effective cudagraph_mode {n.effective_cudagraph_mode}: no graphs ran)"
    text = (
        "the generated text was not compared (no prompt in common)"
        if n.same_text is None
        else "identical generated text: the target is unaffected, the draft path differs"
        if n.same_text
        else "generated text differs too: the target's numerics changed in this mode"
    )
    evidence = (
        f"{pts(n.delta)} pts, beyond the {n.tolerance_pts:g}-pt divergence tolerance; {COUNTERS_ONLY_TEXT}"
        if n.method == COUNTERS_ONLY
        else f"{pts(n.delta)} pts, CI {_ci_list(n.ci)}, {n.prompts} prompts"
    )
    return (
        f"{what} {n.mode} differs from {n.reference_mode} at the same build and variant: pos{n.pos} "
        f"{pct(n.run_rate)} % vs {pct(n.reference_rate)} % ({evidence}){note}; {text}"
    )


def _msg_text_changed(n: TextChanged) -> str:
    return f"greedy output differs across cells/repeats of build {n.build} for prompts {', '.join(n.prompts)}"


def _msg_downgraded(n: Downgraded) -> str:
    return f"requested cudagraph_mode {n.requested} ran as {n.effective} on {n.device_type or 'this platform'}"


def _msg_unchecked(n: Unchecked) -> str:
    if not n.accepted_by:
        return f"the baseline does not record {', '.join(n.fields)}: not checked"
    why = "the run's config names it as its baseline" if n.accepted_by == "config" else "--accept-unchecked"
    return f"the baseline cannot check {', '.join(n.fields)}; used because {why}"


def _msg_failed_requests(n: FailedRequests) -> str:
    died = ", server died during the load" if n.server_died else ""
    first = f": {n.first_error}" if n.first_error else ""
    return f"{n.ok}/{n.total} requests ok ({n.failed} failed, {n.not_finished} not finished{died}){first}"


def _msg_count_mismatch(n: CountMismatch) -> str:
    return (f"repeat {n.repeat}: /metrics spec-decode deltas {n.metrics_delta} differ from the sum of the "
            f"per-request counts {n.per_request_sum}; the per-request counts are what the verdicts use")  # fmt: skip


def _msg_throughput_drop(n: ThroughputDrop) -> str:
    return (f"{n.req_per_s:.2f} req/s vs baseline {n.baseline_req_per_s:.2f} req/s (-{100 * n.drop:.1f} %, "
            f"tolerance {n.tolerance_pct:g} %)")  # fmt: skip


def _msg_not_applied(n: PatchNotApplied) -> str:
    what = "fix not applied" if is_fix(n.patch) else "patch not applied"
    why = "; ".join(d.removeprefix("fix not applied: ") for d in n.details)
    return (f"{n.patch}: {what} in {n.repeats} of {n.of} repeats ({n.status}: {why}); this cell measured the "
            "build without it, whatever its variant's name says")  # fmt: skip


MESSAGES: dict[Kind, Callable[[Any], str]] = {
    Kind.REGRESSION: _msg_regression,
    Kind.INCONCLUSIVE: _msg_inconclusive,
    Kind.UNDERPOWERED: _msg_underpowered,
    Kind.IMPROVEMENT: _msg_improvement,
    Kind.SPECULATION_OFF: _msg_speculation_off,
    Kind.NO_BASELINE: _msg_no_baseline,
    Kind.RUN_FAILED: _msg_run_failed,
    Kind.INSTABILITY: _msg_instability,
    Kind.GRAPH_DIVERGENCE: _msg_divergence,
    Kind.TEXT_CHANGED: _msg_text_changed,
    Kind.GRAPH_DOWNGRADED: _msg_downgraded,
    Kind.UNCHECKED: _msg_unchecked,
    Kind.FAILED_REQUESTS: _msg_failed_requests,
    Kind.COUNT_MISMATCH: _msg_count_mismatch,
    Kind.THROUGHPUT_DROP: _msg_throughput_drop,
    Kind.FIX_NOT_APPLIED: _msg_not_applied,
    Kind.PATCH_NOT_APPLIED: _msg_not_applied,
}


def check_message(x: PositionCheck) -> str:
    """One cell × position check in words (JUnit, CI annotations)."""
    mde = "–" if x.mde is None else f"{100 * x.mde:.1f}"
    if x.method == COUNTERS_ONLY:
        return (f"pos{x.pos} {pct(x.run_rate)} % vs baseline {pct(x.base_rate)} % ({pts(x.delta)} pts; "
                f"{COUNTERS_ONLY_TEXT}): {x.verdict.value}")  # fmt: skip
    return (f"pos{x.pos} {pct(x.run_rate)} % vs baseline {pct(x.base_rate)} % ({pts(x.delta)} pts, CI "
            f"{ci_text(x.ci) or 'none'}, MDE {mde} pts, {x.prompts} prompts): {x.verdict.value}")  # fmt: skip


def finding_message(f: Finding) -> str:
    return MESSAGES[f.kind](f.payload)


def cause_text(f: Finding) -> str:
    return CAUSE_TEXT.get(f.cause, "")


def finding_line(f: Finding) -> str:
    """One line, e.g. for a CI annotation: severity, kind, cell, what was seen."""
    return f"{f.severity.value.upper()} {f.name} {f.cell}: {finding_message(f)}"


def diagnosis_text(d: Finding) -> Text:
    t = Text()
    t.append(f"{d.severity.value.upper():4} ", style=STYLE.get(d.severity, ""))
    t.append(f"{d.name} ", style="bold")
    t.append(f"{d.cell}: {finding_message(d)}")
    if cause_text(d):
        t.append(f"\n       likely cause: {cause_text(d)}", style="dim")
    return t


def certified_text(comp: Comparison) -> str:
    """What a pass certifies, in words: the drop ruled out, where, and at what confidence over the run."""
    if not comp.checks:
        return "no baseline given, so no drop is ruled out"
    certified = [x for x in comp.checks if x.verdict == Verdict.PASS and x.method != COUNTERS_ONLY]
    if not certified:
        return "no drop is ruled out (no check could certify one)"
    pos = sorted({x.pos for x in certified})
    where = f"pos{pos[0]}-{pos[-1]}" if len(pos) > 1 and pos == list(range(pos[0], pos[-1] + 1)) else (
        ", ".join(f"pos{p}" for p in pos))
    cells = len({x.cell for x in certified})
    left = len(comp.checks) - len(certified)
    note = f"; {left} check(s) not certified" if left else ""
    confidence = f"{100 * (1 - comp.gate.false_alarm):g} % confidence over the run's {comp.family} checks"
    return f"no drop ≥ {comp.gate.tolerance_pts:g} pts at {where} in {cells} cell(s), {confidence}{note}"


def verdict_text(comp: Comparison) -> str:
    code = comp.exit_code
    fails = [d for d in comp.diagnoses if d.exit_code == code and d.severity == Severity.FAIL]
    ncells = len({d.cell for d in fails})
    kinds = ", ".join(sorted({d.name for d in fails}))
    if code == ExitCode.OK:
        warns = sum(1 for d in comp.diagnoses if d.severity == Severity.WARN)
        tail = f", {warns} warning(s)" if warns else ""
        return f"PASS: {len(comp.cells)} cells, {certified_text(comp)}; no regression or bug signature{tail} (exit 0)"
    if code == ExitCode.REGRESSION:
        return f"FAIL: {kinds} in {ncells} cell(s) (exit 1)"
    if code == ExitCode.NOT_COMPARABLE:
        return f"NOT COMPARABLE: {ncells} cell(s) have no baseline entry to judge them by (exit 4)"
    if code == ExitCode.INCONCLUSIVE:
        return f"INCONCLUSIVE: {kinds} in {ncells} cell(s); the data can neither confirm nor rule out a drop (exit 5)"
    return "INCOMPLETE: some repeats did not finish and were left out of the verdicts (exit 3)"


def verdict_line(comp: Comparison) -> Text:
    style = {ExitCode.OK: "bold green", ExitCode.REGRESSION: "bold red"}.get(comp.exit_code, "bold yellow")
    return Text(verdict_text(comp), style=style)


def comparison_renderable(comp: Comparison, show_checks: bool = True, ci: bool = True) -> Group:
    parts: list[Any] = [summary_table(comp.cells, title=f"run {comp.run_id}", ci=ci)]
    if comp.baseline and show_checks:
        parts.append(checks_table(comp.checks, comp.baseline, ci))
        prov = comp.baseline_provenance
        if prov:
            src, date = prov.get("source"), prov.get("date", "undated")
            parts.append(Text(f"baseline provenance: {src} ({date})", style="dim"))
    parts.extend(diagnosis_text(d) for d in comp.diagnoses)
    parts.append(verdict_line(comp))
    return Group(*parts)


# --- machine-readable ---------------------------------------------------------------------------------

# Bulky or internal: not part of the document. (counters_only shows as each check's `method`.)
_SKIP = {"load_outputs", "evidence", "observations", "prompt_names", "counters_only"}


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Enum):
        return obj.value
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name not in _SKIP}
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
        "checks": _jsonable(comp.checks),
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
    }


def comparison_json(comp: Comparison) -> str:
    return json.dumps(comparison_document(comp), indent=2, ensure_ascii=False)


def comparison_markdown(comp: Comparison) -> str:
    lines = [f"### mtpbench: run `{comp.run_id}`" + (f" vs `{comp.baseline}`" if comp.baseline else ""), ""]
    lines += [f"**{verdict_text(comp)}**", ""]
    lines += markdown_table(*summary_rows(comp.cells, ci=True))
    if comp.baseline:
        lines += ["", *markdown_table(*check_rows(comp.checks))]
    if comp.diagnoses:
        lines.append("")
        for d in comp.diagnoses:
            cause = f" — likely cause: {cause_text(d)}" if cause_text(d) else ""
            lines.append(f"- **{d.severity.value.upper()} {d.name}** `{d.cell}`: {finding_message(d)}{cause}")
    return "\n".join(lines) + "\n"


# Checks whose verdict is a failure of the gate on their own; NO_DATA / NO_BASELINE checks are skipped
# testcases because the cell-level finding (speculation-off, run-failed, no-baseline) carries the failure.
_CHECK_FAILS = {Verdict.REGRESSION, Verdict.INCONCLUSIVE}
# Signatures every cell is tested for, so a pass shows up as a passing testcase.
_CELL_SIGNATURES = (Kind.SPECULATION_OFF, Kind.INSTABILITY, Kind.GRAPH_DIVERGENCE)


def comparison_junit(comp: Comparison) -> str:
    """One testcase per cell × position, per cell × signature, and per other finding. A testcase fails
    exactly when a finding breaks the gate, so `failures > 0` iff the exit code is not 0."""
    suite = ET.Element("testsuite", name=f"mtpbench.{comp.run_id}")
    n = failures = 0
    failing_improvement = {d.cell for d in comp.diagnoses if d.kind == Kind.IMPROVEMENT and d.severity == Severity.FAIL}

    def case(classname: str, name: str) -> ET.Element:
        nonlocal n
        n += 1
        return ET.SubElement(suite, "testcase", classname=f"mtpbench.{classname}", name=name)

    def fail(el: ET.Element, kind: str, message: str, text: str = "") -> None:
        nonlocal failures
        failures += 1
        ET.SubElement(el, "failure", message=message, type=kind).text = text or None

    for x in comp.checks:
        el = case(x.cell, f"pos{x.pos}")
        desc = check_message(x)
        if x.verdict in _CHECK_FAILS or (x.verdict == Verdict.IMPROVEMENT and x.cell in failing_improvement):
            fail(el, x.verdict.value, desc)
        elif x.verdict in (Verdict.NO_DATA, Verdict.NO_BASELINE):
            ET.SubElement(el, "skipped", message=f"{x.verdict.value}: {desc}")
        else:
            ET.SubElement(el, "system-out").text = f"{x.verdict.value}: {desc}"
    covered: set[int] = set()
    for c in comp.cells:
        for kind in _CELL_SIGNATURES:
            el = case(c.cell, kind.value)
            for i, d in enumerate(comp.diagnoses):
                if d.kind == kind and d.cell == c.cell:
                    covered.add(i)
                    if d.severity == Severity.FAIL:
                        fail(el, kind.value, finding_message(d), cause_text(d))
                    else:
                        ET.SubElement(el, "system-out").text = finding_line(d)
    for i, d in enumerate(comp.diagnoses):
        by_checks = d.kind in (Kind.REGRESSION, Kind.IMPROVEMENT) or (
            d.kind == Kind.INCONCLUSIVE and isinstance(d.payload, PositionChecks)
        )
        if i in covered or by_checks:
            continue  # already a testcase: its cell × signature, or its cell × position checks
        el = case(d.cell, d.name)
        if d.severity == Severity.FAIL:
            fail(el, d.name, finding_message(d), cause_text(d))
        else:
            ET.SubElement(el, "system-out").text = finding_line(d)
    el = case("gate", "verdict")
    if comp.exit_code != ExitCode.OK and failures == 0:  # defensive: the file must never read green
        fail(el, "verdict", verdict_text(comp))
    ET.SubElement(el, "system-out").text = verdict_text(comp)
    suite.set("tests", str(n))
    suite.set("failures", str(failures))
    # Jenkins' JUnit schema requires `errors` (tests/data/junit-jenkins.xsd); a gate check never errors.
    suite.set("errors", "0")
    suite.set("skipped", str(len(suite.findall("testcase/skipped"))))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


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


def not_comparable_junit(exc: NotComparableError) -> str:
    suite = ET.Element("testsuite", name=f"mtpbench.{exc.run_id or 'run'}", tests="1", failures="1")
    el = ET.SubElement(suite, "testcase", classname="mtpbench.gate", name="comparable")
    ET.SubElement(el, "failure", message=str(exc), type="not-comparable")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
