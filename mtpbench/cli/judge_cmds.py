"""The commands that read stored runs and baselines: `show` (a run alone), `compare` (the CI gate),
`report` (HTML and PNG), `history` (the trend across runs) and `size` (how many prompts certify δ). Each
checks its options before a run is loaded, asks judge/ for the verdict and render/ for its output, and
returns the verdict's exit code (`report`, `history` and `size` exit 0 once written).

`judge_run` is how the command line's options reach the one judging (`show`, `compare`, `report`, `size --run`
and the end of `run` alike): it changes the config's gate, admits the baseline and calls judge/compare.py
`judge`, handing it `report`'s painter.

Imports of judge/, store/, render/ and config stay inside the functions (or under TYPE_CHECKING): they bring
pandas, scipy and pydantic, which `mtpbench --help` and the commands that do not judge must not pay for.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mtpbench.cli.common import console, err_console, make_parent, publish_github, wide
from mtpbench.errors import NotComparableError, UserError

if TYPE_CHECKING:
    from mtpbench.judge.compare import Comparison
    from mtpbench.judge.evidence import Evidence
    from mtpbench.render.htmlreport import Figures
    from mtpbench.store.baseline import Baseline
    from mtpbench.store.results import Run

__all__ = ["JudgeOptions", "compare_cmd", "emit", "history_cmd", "judge_run", "report_cmd", "show", "size"]


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot write JUnit file: {exc}") from None


def _check_options(tolerance: float | None, junit: Path | None, as_json: bool = False, markdown: bool = False) -> None:
    """Options that would only fail after the work is done (or pass silently, as NaN would) fail first."""
    if as_json and markdown:
        raise UserError("--json and --markdown: give one of them (both would go to stdout)")
    if tolerance is not None and not (math.isfinite(tolerance) and tolerance >= 0):
        raise UserError(f"--tolerance: expected a finite number of points >= 0, got {tolerance}")
    if junit is not None:
        from mtpbench.config import path_kind

        if path_kind(junit, "--junit") == "dir":
            raise UserError(f"--junit {junit}: is a folder, not a file")
        make_parent(junit, "--junit")


def _check_report_paths(html: Path | None, png: Path | None) -> None:
    """Outputs that cannot be written, named before a big run is loaded and judged, not after."""
    from mtpbench.config import path_kind

    if html is not None and path_kind(html, "--html") == "dir":
        raise UserError(f"--html {html}: is a folder, not a file")
    if png is not None and path_kind(png, "--png") in ("file", "other"):
        raise UserError(f"--png {png}: is a file, not a folder")


# How a run is judged: the same options for `compare` (the gate) and `report` (which shows its verdict).
ToleranceOpt = Annotated[
    float | None, typer.Option(help="δ per position, points (>= 0); the AL δ is the config's gate.tolerance_al_pct.")
]
AllowUnmatchedOpt = Annotated[
    bool, typer.Option("--allow-unmatched", help="A cell with no baseline entry warns instead of exit 4.")
]
AcceptUncheckedOpt = Annotated[
    bool, typer.Option("--accept-unchecked", help="Use a baseline that cannot check the model, drafter or prompts.")
]
FailUnderpoweredOpt = Annotated[
    bool, typer.Option("--fail-underpowered", help="Exit 5 when a cell could not detect a tolerance-sized drop.")
]


@dataclass(frozen=True)
class JudgeOptions:
    """How the command line changes the config's gate and the baseline's strictness (compare, report, size)."""

    tolerance: float | None = None
    allow_unmatched: bool = False
    accept_unchecked: bool = False
    fail_underpowered: bool = False


def judge_run(
    run: Run,
    baseline_path: Path | None,
    opts: JudgeOptions | None = None,
    *,
    baseline: Baseline | None = None,
    run_failed: bool = False,
    evidence: Evidence | None = None,
    figures: Figures | None = None,
) -> Comparison:
    """The run's Comparison under the config's gate with the command line's changes; without a baseline,
    the signatures that need none. `baseline`: already loaded from `baseline_path`; `evidence`: already
    collected (`run` refreshes the history point from it first); `figures`: `report`'s painter, handed the
    cells and checks before the diagnoses are made, so that it draws while this process diagnoses."""
    from mtpbench.judge.compare import judge
    from mtpbench.store.baseline import load_baseline

    opts = opts or JudgeOptions()
    gate = run.typed.config.gate
    if opts.tolerance is not None:
        gate = gate.model_copy(update={"tolerance_pts": opts.tolerance})
    if opts.fail_underpowered:
        gate = gate.model_copy(update={"fail_on_underpowered": True})
    if baseline is None and baseline_path is not None:
        baseline = load_baseline(baseline_path)
    return judge(
        run,
        baseline,
        gate,
        baseline_name=None if baseline_path is None else str(baseline_path),
        baseline_path=baseline_path,
        allow_unmatched=opts.allow_unmatched,
        accept_unchecked=opts.accept_unchecked,
        run_failed=run_failed,
        evidence=evidence,
        painter=figures,
    )


def emit(comp: Comparison, as_json: bool, markdown: bool, junit: Path | None) -> int:
    """Render a comparison in the asked format (and JUnit beside it); its exit code, the one every format shows."""
    from mtpbench.render import junit as junit_xml
    from mtpbench.render import report
    from mtpbench.render import serving as rs

    serving = comp.serving
    if junit is not None:
        _write(junit, junit_xml.comparison_junit(comp))
    if as_json:
        text = report.comparison_json(comp)
        sys.stdout.write((rs.add_to_json(text, serving) if serving else text) + "\n")
    elif markdown:
        sys.stdout.write(report.comparison_markdown(comp) + (("\n" + rs.serving_markdown(serving)) if serving else ""))
    else:
        console.print(report.comparison_renderable(comp, ci=wide()))
        if serving:
            console.print(rs.serving_table(serving))
    return int(comp.exit_code)


# The report exits 0 once written: its judging options change the verdict it shows, not its exit code.
_H_UNMATCHED_VERDICT = "A cell with no baseline entry warns instead of making the verdict not comparable."
_H_UNDERPOWERED_VERDICT = "A cell that could not detect a tolerance-sized drop makes the verdict inconclusive."


def show(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Markdown instead of a table.")] = False,
) -> int:
    """The summary table of a stored run and the bug signatures that need no baseline; exits with their verdict."""
    from mtpbench.store.results import load_run

    _check_options(None, None, as_json, markdown)
    return emit(judge_run(load_run(run_dir), None), as_json, markdown, None)


def compare_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    baseline: Annotated[Path, typer.Option(help="Baseline file (baselines/*.yaml).")],
    tolerance: ToleranceOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Markdown for a PR comment.")] = False,
    junit: Annotated[Path | None, typer.Option(help="Also write JUnit XML here.")] = None,
    github: Annotated[
        bool,
        typer.Option(
            "--github",
            help="GitHub Actions output: step summary + ::error annotations (automatic when GITHUB_ACTIONS=true).",
        ),
    ] = False,
    allow_unmatched: AllowUnmatchedOpt = False,
    accept_unchecked: AcceptUncheckedOpt = False,
    fail_underpowered: FailUnderpoweredOpt = False,
) -> int:
    """Check a run against a baseline; the exit code is the CI gate's verdict.

    A pass (exit 0) certifies, at the gate's confidence (95 %, simultaneous over the cells), that no cell's
    acceptance length (1 + accepted tokens per draft step) fell by 5 % of the baseline's or more; a drop at
    one position that is significant and 5 pts or more fails too (gate.primary: positions certifies every
    position instead). The run's false-alarm rate (1 %) is split over all of its checks; `mtpbench size` says
    how many prompts make a 5 % drop fail with 90 % power (benchmarks/reports/gate_power.md measures both).
    """
    from mtpbench.render import junit as junit_xml
    from mtpbench.render import report
    from mtpbench.store.results import load_run

    _check_options(tolerance, junit, as_json, markdown)
    opts = JudgeOptions(tolerance, allow_unmatched, accept_unchecked, fail_underpowered)
    r = load_run(run_dir)
    try:
        comp = judge_run(r, baseline, opts)
    except NotComparableError as exc:
        # CI still reads a document: the same verdict as the exit code, in every format asked for.
        if junit is not None:
            _write(junit, junit_xml.not_comparable_junit(exc))
        if as_json:
            sys.stdout.write(report.not_comparable_json(exc) + "\n")
        raise
    code = emit(comp, as_json, markdown, junit)
    publish_github(comp, github)
    return code


def size(
    baseline: Annotated[
        Path, typer.Argument(help="A baseline (per-prompt counts as baseline save keeps them; else a stated prior).")
    ],
    pilot: Annotated[Path | None, typer.Option("--run", help="A pilot run: size from its paired spread.")] = None,
    checks: Annotated[int, typer.Option(help="Checks the run makes (AL + k per cell, k per graph cell).", min=1)] = 11,
    cells: Annotated[int, typer.Option(help="Cells the run judges (its primary checks: one AL each).", min=1)] = 2,
    tolerance: ToleranceOpt = None,
) -> int:
    """How many prompts the gate needs to certify δ: acceptance length, each position, graph divergence (exit 0;
    2 on bad input; 4 for a pilot run the baseline cannot judge)."""
    from mtpbench.config import GateSpec
    from mtpbench.judge.sizing import primary_count, size_baseline, size_pilot
    from mtpbench.render.sizingreport import sizing_table
    from mtpbench.store.baseline import load_baseline

    _check_options(tolerance, None)  # a finite number of points, as compare and report take it
    if pilot is not None:
        from mtpbench.store.results import load_run

        comp = judge_run(load_run(pilot), baseline, JudgeOptions(tolerance, accept_unchecked=True))
        console.print(sizing_table(size_pilot(comp), comp.gate, "the pilot's"))
        return 0
    b = load_baseline(baseline)
    gate = GateSpec() if tolerance is None else GateSpec(tolerance_pts=tolerance)
    k = b.fingerprint.num_speculative_tokens
    primary = primary_count(gate, cells, k)
    # The checks beyond AL + k per cell are graph divergence (k per graph cell paired with eager).
    divergence = max(checks - cells * (k + 1), 0)
    console.print(sizing_table(size_baseline(b, gate, checks, primary, divergence), gate, "the baseline's"))
    return 0


def report_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    baseline: Annotated[Path | None, typer.Option(help="Baseline file to judge the run by.")] = None,
    html: Annotated[Path | None, typer.Option("--html", help="Write the self-contained HTML report here.")] = None,
    png: Annotated[Path | None, typer.Option("--png", help="Also write the figures as PNG files into DIR.")] = None,
    tolerance: ToleranceOpt = None,
    allow_unmatched: Annotated[bool, typer.Option("--allow-unmatched", help=_H_UNMATCHED_VERDICT)] = False,
    accept_unchecked: AcceptUncheckedOpt = False,
    fail_underpowered: Annotated[bool, typer.Option("--fail-underpowered", help=_H_UNDERPOWERED_VERDICT)] = False,
) -> None:
    """An HTML report (verdict, figures, fingerprint) that opens offline. Exits 0 once written, whatever the
    verdict it shows (the gate is `compare`: give the report the options the gate was given, and it shows
    the gate's verdict); 2 on bad input, 4 when the baseline cannot judge the run."""
    from mtpbench.render import plots
    from mtpbench.render.painter import Painter

    if html is None and png is None:
        raise UserError("report: give --html FILE and/or --png DIR")
    _check_options(tolerance, None)
    _check_report_paths(html, png)
    plots.check_installed()  # before a big run is loaded, not after
    opts = JudgeOptions(tolerance, allow_unmatched, accept_unchecked, fail_underpowered)
    # The figures are drawn by a second process while this one imports, loads and judges the run
    # (painter.py): started before the heavy imports, so that its own overlap them.
    with Painter.start() as painter:
        from mtpbench.render import htmlreport
        from mtpbench.store.results import load_run

        figures = htmlreport.Figures(painter, html is not None, png)
        r = load_run(run_dir)
        comp = judge_run(r, baseline, opts, figures=figures)
        out = htmlreport.write_report(r, comp, html, png, figures)
    for path in [out.html_path, *out.pngs]:
        if path is not None:
            console.print(f"wrote {path}", highlight=False, soft_wrap=True)


def history_cmd(
    runs: Annotated[list[Path] | None, typer.Argument(metavar="RUN...", help="Run folders, in any order.")] = None,
    runs_dir: Annotated[Path | None, typer.Option("--runs", help="A folder of run folders (runs/).")] = None,
    tolerance: Annotated[
        float | None,
        typer.Option(help="Smallest move that counts, points (default: the config's gate.tolerance_pts).", min=0),
    ] = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write the trend as a self-contained HTML page.")
    ] = None,
    png: Annotated[Path | None, typer.Option("--png", help="Also write one trend PNG per group into DIR.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of tables.")] = False,
) -> None:
    """Per-position acceptance across runs of the same config, and the first run where a position moved."""
    from mtpbench.judge import history
    from mtpbench.render import historyreport

    paths = list(runs or [])
    if runs_dir is not None:
        paths += history.find_runs(runs_dir)
    if not paths:
        raise UserError("history: give run folders or --runs DIR")
    h = history.build_history(paths, tolerance)
    if as_json:
        sys.stdout.write(historyreport.history_json(h) + "\n")
    else:
        console.print(historyreport.history_renderable(h))
    for path in historyreport.write_outputs(h, html, png):
        err_console.print(f"wrote {path}", highlight=False, soft_wrap=True)
