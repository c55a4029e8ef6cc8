"""The `mtpbench` command line: parse, call one library function, render, map the outcome to an exit code.

Exit codes (errors.py, DESIGN.md): 0 pass, 1 regression or bug signature, 2 bad input, 3 run failed or
internal error, 4 not comparable, 5 inconclusive. Every command goes through `_guarded`, the one handler:
a command returns its exit code; a `UserError` becomes one line on stderr and its code; any other
exception becomes one line naming a log file that holds the traceback, and exit 3 — never 1, which
means "regression" to every CI.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
import tempfile
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from mtpbench import __version__
from mtpbench.errors import ExitCode, UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Acceptance-rate regression bench and CI gate for speculative decoding on vLLM / vllm-ascend.",
)
baseline_app = typer.Typer(no_args_is_help=True, help="Make baselines from runs.")
app.add_typer(baseline_app, name="baseline")

console = Console(width=int(os.environ.get("MTPBENCH_WIDTH", "0")) or None)
err_console = Console(stderr=True)


def _wide() -> bool:
    # The intervals widen the table past 80 columns: show them where they fit (--json always has them).
    return console.width >= 90


def _say(line: str) -> None:
    err_console.print(line, markup=False, highlight=False, soft_wrap=True)


def _crash_log(exc: BaseException) -> str:
    """Write the traceback of an unexpected error to a log file; where it went (or why it could not)."""
    folder = Path(os.environ.get("MTPBENCH_LOG_DIR") or Path(tempfile.gettempdir()) / "mtpbench-logs")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = folder / f"crash-{stamp}-{os.getpid()}.log"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        path.write_text(f"mtpbench {__version__}: {' '.join(sys.argv)}\n{text}", encoding="utf-8")
    except OSError as again:
        return f"the traceback could not be saved either: {again}"
    return f"traceback: {path}"


def _guarded(fn: Callable[..., int | None]) -> Callable[..., None]:
    """The one error handler and exit path of every command (asv's main.py pattern)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            code = int(fn(*args, **kwargs) or 0)
        except (typer.Exit, click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except UserError as exc:
            _say(f"mtpbench: error: {exc}")
            code = int(exc.exit_code)
        except KeyboardInterrupt:
            _say("mtpbench: interrupted")
            code = 130
        except Exception as exc:
            first = (str(exc).splitlines() or [""])[0][:300]
            _say(f"mtpbench: internal error: {type(exc).__name__}: {first} ({_crash_log(exc)})")
            code = int(ExitCode.RUN_FAILED)
        raise typer.Exit(code)

    return wrapper


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        console.print(f"mtpbench {__version__}")
        raise typer.Exit(0)


# --- run ------------------------------------------------------------------------------------------------


class _ProgressView:
    """Turns runner events into a rich progress bar and one line per finished cell-repeat."""

    def __init__(self, progress: Progress, total_cells: int, prompts: int) -> None:
        self.p = progress
        self.cells = progress.add_task("cells", total=total_cells)
        self.prompts = progress.add_task("prompts", total=total_cells * prompts)
        self.per_cell = prompts
        self.cell_prompts = 0  # prompts finished by the cell-repeat in flight

    def __call__(self, kind: str, payload: dict[str, Any]) -> None:
        cell = payload.get("cell")
        label = f"{cell.cell_id} r{cell.repeat} (PYTHONHASHSEED={cell.hash_seed})" if cell is not None else ""
        if kind == "cell_start":
            self.p.update(self.cells, description=f"starting {label}")
            self.cell_prompts = 0
        elif kind == "engine_ready":
            eff = payload.get("effective", {})
            self.p.update(
                self.cells,
                description=f"{label} engine up in {payload.get('engine_start_s', 0):.1f} s "
                f"(cudagraph_mode {eff.get('cudagraph_mode')})",
            )
        elif kind == "prompt_done":
            self.cell_prompts += 1
            self.p.advance(self.prompts)
        elif kind == "cell_end":
            self.p.update(self.cells, description="cells")
            self.p.advance(self.cells)
            missing = self.per_cell - self.cell_prompts
            if missing > 0:
                self.p.advance(self.prompts, missing)
            status = payload.get("status")
            style = "green" if status == "ok" else "red"
            tail = "" if status == "ok" else f": {str(payload.get('error') or '').splitlines()[0]}"
            self.p.console.print(
                f"[{style}]{status}[/] {label} in {payload.get('wall_s', 0):.1f} s{tail}", markup=True, highlight=False
            )


@app.command()
@_guarded
def run(
    config: Annotated[Path, typer.Argument(help="Experiment config (configs/*.yaml).")],
    out: Annotated[Path, typer.Option(help="Folder for run results.")] = Path("runs"),
    repeats: Annotated[int | None, typer.Option(help="Override the config's repeats.", min=1)] = None,
    mode: Annotated[list[str] | None, typer.Option("--mode", help="Only these modes (repeatable).")] = None,
    build: Annotated[list[str] | None, typer.Option("--build", help="Only these builds (repeatable).")] = None,
    variant: Annotated[list[str] | None, typer.Option("--variant", help="Only these variants (repeatable).")] = None,
    baseline: Annotated[Path | None, typer.Option(help="Baseline to compare with (default: the config's).")] = None,
    no_compare: Annotated[bool, typer.Option("--no-compare", help="Only run; print the summary.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List cells, commands, env; start nothing.")] = False,
) -> int:
    """Run every build × mode × variant × repeat in fresh processes, then print the verdict."""
    return _run(config, out, repeats, mode, build, variant, baseline, no_compare, dry_run)


def _select(cfg: Any, repeats: int | None, modes: list[str] | None, builds: list[str] | None,
            variants: list[str] | None) -> None:  # fmt: skip
    for axis, chosen in (("modes", modes), ("builds", builds), ("variants", variants)):
        have = getattr(cfg, axis)
        for name in chosen or []:
            if name not in have:
                raise UserError(f"--{axis[:-1]} {name!r}: not in the config's {axis} ({', '.join(have)})")
        if chosen:
            setattr(cfg, axis, {k: v for k, v in have.items() if k in chosen})
    if repeats is not None:
        seeds = cfg.seeds()
        cfg.hash_seeds = seeds[:repeats] if repeats <= len(seeds) else [*seeds, *range(len(seeds), repeats)]
        cfg.repeats = repeats


def _run(config: Path, out: Path, repeats: int | None, modes: list[str] | None, builds: list[str] | None,
         variants: list[str] | None, baseline: Path | None, no_compare: bool, dry_run: bool) -> int:  # fmt: skip
    from mtpbench import runner
    from mtpbench.config import load_config, load_prompts
    from mtpbench.results import timing

    cfg = load_config(config)
    _select(cfg, repeats, modes, builds, variants)
    prompts = load_prompts(cfg.prompts)
    base = baseline or (Path(cfg.baseline) if cfg.baseline else None)
    base_obj = None
    if base is not None and not no_compare and not dry_run:
        from mtpbench.baseline import load_baseline

        base_obj = load_baseline(base)  # bad baseline: refuse before spending minutes on engines
    cells = runner.expand(cfg)
    if dry_run:
        plans = runner.plan(cfg, prompts, cells, "DRY-RUN", str(out / "<run>" / "records.jsonl"))
        _render_dry_run(cfg, prompts, plans)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        view = _ProgressView(progress, len(cells), len(prompts.prompts))
        try:
            outcome = runner.execute(cfg, prompts, out, str(config), cells, view)
        except KeyboardInterrupt:
            err_console.print("mtpbench: interrupted; finished prompts are kept in the run folder")
            return 130
    t = timing(outcome.manifest)
    share = 100 * t["engine_start_s"] / t["wall_s"] if t["wall_s"] else 0.0
    console.print(
        f"results: {outcome.path}\n"
        f"time: {int(t['cells'])} cell-repeats, {t['wall_s']:.1f} s in workers, of which engine start-up "
        f"{t['engine_start_s']:.1f} s ({share:.0f} %), prompts and process start {t['other_s']:.1f} s",
        highlight=False,
    )
    return _verdict(outcome.path, base_obj, str(base) if base else None, run_failed=bool(outcome.failed))


def _verdict(
    run_path: Path, base_obj: Any, base_name: str | None, run_failed: bool, *, allow_unmatched: bool = False,
    accept_unchecked: bool = False,
) -> int:  # fmt: skip
    """The verdict at the end of `run`: the same comparison and exit code as `compare` (or `show`)."""
    from mtpbench import compare as cmp
    from mtpbench import report
    from mtpbench.results import load_run

    r = load_run(run_path)
    if base_obj is None:
        comp = cmp.analyze(r, run_failed=run_failed)
    else:
        comp = cmp.compare(r, base_obj, baseline_name=base_name, baseline_path=base_name, run_failed=run_failed,
                           allow_unmatched=allow_unmatched, accept_unchecked=accept_unchecked)  # fmt: skip
    console.print(report.comparison_renderable(comp, ci=_wide()))
    return int(comp.exit_code)


def _render_dry_run(cfg: Any, prompts: Any, plans: list[Any]) -> None:
    console.print(
        f"[bold]{cfg.name}[/]: {len(plans)} cell-repeats = {len(cfg.builds)} builds × {len(cfg.modes)} modes × "
        f"{len(cfg.variants)} variants × {cfg.repeats} repeats; {len(prompts.prompts)} prompts "
        f"(sha256 {prompts.sha256()[:12]}), k={cfg.speculative.num_speculative_tokens}, "
        f"temperature {cfg.sampling.temperature}, max_tokens {cfg.sampling.max_tokens}",
        highlight=False,
    )
    for p in plans:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in p.env.items())
        eng = {k: v for k, v in p.job["engine_args"].items() if k in ("enforce_eager", "compilation_config")}
        console.print(f"\n[bold]{p.cell.cell_id}[/] repeat {p.cell.repeat}", highlight=False)
        console.print(f"  $ {env} {shlex.join(p.command())}", markup=False, highlight=False, soft_wrap=True)
        console.print(f"  patches: {', '.join(p.job['patches']) or 'none'}; engine overrides: {eng or 'none'}",
                      markup=False, highlight=False, soft_wrap=True)  # fmt: skip
    console.print("\ndry run: nothing was started")


# --- show / compare / baseline ------------------------------------------------------------------------


def _emit(comp: Any, as_json: bool, markdown: bool, junit: Path | None) -> int:
    """Render a comparison in the asked format (and JUnit beside it); its exit code, the one every format shows."""
    from mtpbench import report

    if junit is not None:
        _write(junit, report.comparison_junit(comp))
    if as_json:
        sys.stdout.write(report.comparison_json(comp) + "\n")
    elif markdown:
        sys.stdout.write(report.comparison_markdown(comp))
    else:
        console.print(report.comparison_renderable(comp, ci=_wide()))
    return int(comp.exit_code)


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot write JUnit file: {exc}") from None


@app.command()
@_guarded
def show(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Markdown instead of a table.")] = False,
) -> int:
    """The summary table of a stored run and the bug signatures that need no baseline; exits with their verdict."""
    from mtpbench import compare as cmp
    from mtpbench.results import load_run

    return _emit(cmp.analyze(load_run(run_dir)), as_json, markdown, None)


@app.command("compare")
@_guarded
def compare_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    baseline: Annotated[Path, typer.Option(help="Baseline file (baselines/*.yaml).")],
    tolerance: Annotated[float | None, typer.Option(help="Allowed drop per position, points.", min=0)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Markdown for a PR comment.")] = False,
    junit: Annotated[Path | None, typer.Option(help="Also write JUnit XML here.")] = None,
    allow_unmatched: Annotated[
        bool, typer.Option("--allow-unmatched", help="A cell with no baseline entry warns instead of exit 4.")
    ] = False,
    accept_unchecked: Annotated[
        bool,
        typer.Option("--accept-unchecked", help="Use a baseline that cannot check the model, drafter or prompts."),
    ] = False,
    fail_underpowered: Annotated[
        bool, typer.Option("--fail-underpowered", help="Exit 5 when a cell could not detect a tolerance-sized drop.")
    ] = False,
) -> int:
    """Check a run against a baseline; the exit code is the CI gate's verdict."""
    from mtpbench import compare as cmp
    from mtpbench import report
    from mtpbench.baseline import load_baseline
    from mtpbench.config import GateSpec
    from mtpbench.errors import NotComparableError
    from mtpbench.results import load_run

    r = load_run(run_dir)
    b = load_baseline(baseline)
    gate = GateSpec.model_validate(r.manifest["config"].get("gate", {}))
    if tolerance is not None:
        gate = gate.model_copy(update={"tolerance_pts": tolerance})
    if fail_underpowered:
        gate = gate.model_copy(update={"fail_on_underpowered": True})
    try:
        comp = cmp.compare(r, b, gate, baseline_name=str(baseline), baseline_path=baseline,
                           allow_unmatched=allow_unmatched, accept_unchecked=accept_unchecked)  # fmt: skip
    except NotComparableError as exc:
        # CI still reads a document: the same verdict as the exit code, in every format asked for.
        if junit is not None:
            _write(junit, report.not_comparable_junit(exc))
        if as_json:
            sys.stdout.write(report.not_comparable_json(exc) + "\n")
        raise
    return _emit(comp, as_json, markdown, junit)


@baseline_app.command("save")
@_guarded
def baseline_save(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    out: Annotated[Path, typer.Option(help="Baseline file to write.")],
    name: Annotated[str | None, typer.Option(help="Baseline name (default: the file's stem).")] = None,
    variant: Annotated[str, typer.Option(help="Variant whose cells become the baseline.")] = "stock",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> int:
    """Write a baseline (per build/mode rates, pooled and per-prompt counts, provenance) from a complete run."""
    from mtpbench import compare as cmp
    from mtpbench.baseline import baseline_from_cells, write_baseline
    from mtpbench.results import load_run

    r = load_run(run_dir)
    cells = [c for c in cmp.collect(r) if c.variant == variant]
    if not cells:
        raise UserError(f"{run_dir}: no cells of variant {variant!r}")
    if any(not c.complete for c in cells):
        raise UserError(f"{run_dir}: some cells did not finish; a baseline must come from a complete run")
    per_cell = [(c.build, c.mode, _counts_dict(c.summary.counts), len(c.repeats), _prompt_counts(c)) for c in cells]
    b = baseline_from_cells(r, name or out.stem, per_cell)
    write_baseline(b, out, force)
    console.print(f"wrote {out} ({len(b.entries)} entries from run {r.run_id})", markup=False, highlight=False)
    return 0


def _counts_dict(c: Any) -> dict[str, Any]:
    return {"num_drafts": c.num_drafts, "num_draft_tokens": c.num_draft_tokens,
            "num_accepted_tokens": c.num_accepted_tokens, "accepted_per_pos": list(c.accepted_per_pos)}  # fmt: skip


def _prompt_counts(cell: Any) -> dict[str, dict[str, Any]]:
    ev = cell.evidence
    return {
        pid: {"num_drafts": int(ev.drafts[i]), "num_draft_tokens": int(ev.draft_tokens[i]),
              "num_accepted_tokens": int(ev.accepted[i]), "accepted_per_pos": [int(x) for x in ev.per_pos[i]]}
        for i, pid in enumerate(ev.ids)
    }  # fmt: skip


# --- doctor / selftest -----------------------------------------------------------------------------------

DOCTOR_STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red"}


@app.command()
@_guarded
def doctor(
    python: Annotated[str | None, typer.Option(help="Interpreter of the build to check (default: this one).")] = None,
    engine: Annotated[bool, typer.Option(help="Also start an engine on the embedded tiny pair.")] = True,
) -> int:
    """Platform, device, package versions, broken torchvision, and whether an engine starts."""
    from mtpbench import doctor as doc

    checks = doc.checks_from_probe(doc.probe(python))
    t = Table(show_header=True)
    t.add_column("check")
    t.add_column("status")
    t.add_column("detail", overflow="fold")
    for c in checks:
        # Text, not markup: a status or detail may hold brackets (and an empty style broke "[]info[/]").
        t.add_row(Text(c.name), Text(c.status, style=DOCTOR_STYLE.get(c.status, "")), Text(c.detail))
    console.print(t)
    failed = any(c.status == "fail" for c in checks)
    if engine and not failed:
        from mtpbench.selftest import engine_check

        with console.status("starting an engine on the embedded tiny pair…"):
            try:
                ok, detail = engine_check(python, Path(tempfile.mkdtemp(prefix="mtpbench-doctor-")))
            except UserError as exc:  # e.g. the embedded config is missing after a non-editable install
                ok, detail = False, str(exc)
        line = Text(f"engine {'ok' if ok else 'fail'}", style="green" if ok else "bold red")
        line.append(f": {detail}", style="")
        console.print(line)
        failed = not ok
    return int(ExitCode.RUN_FAILED) if failed else 0


@app.command()
@_guarded
def selftest(
    out: Annotated[Path, typer.Option(help="Folder for the selftest's run.")] = Path("runs"),
) -> int:
    """Prove the gate has teeth: the embedded pair stock vs the injected flattening fault."""
    from mtpbench import report
    from mtpbench.selftest import run_selftest

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        result = run_selftest(out, lambda total, prompts: _ProgressView(progress, total, prompts))
    console.print(report.comparison_renderable(result.comparison, ci=_wide()))
    for line in result.lines:
        console.print(line, markup=False, highlight=False)
    console.print(
        Text("SELFTEST PASS", style="bold green").append(": the gate catches the flattening fault", style="")
        if result.passed
        else Text("SELFTEST FAIL", style="bold red").append(": the gate did not behave as required", style="")
    )
    # The selftest's own verdict: 1 when the gate missed the fault (a regression of mtpbench itself).
    return 0 if result.passed else int(ExitCode.REGRESSION)


def main() -> None:
    app()
