"""The `mtpbench` command line: parse, call one library function, render, map the outcome to an exit code.

Exit codes (DESIGN.md): 0 pass, 1 regression or bug signature, 2 bad input, 3 run failed, 4 not comparable.
A `UserError` anywhere becomes one line on stderr and its exit code, never a traceback.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

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


def _fail(exc: UserError) -> typer.Exit:
    err_console.print(f"mtpbench: error: {exc}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(int(exc.exit_code))


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
) -> None:
    """Run every build × mode × variant × repeat in fresh processes, then print the verdict."""
    try:
        raise typer.Exit(_run(config, out, repeats, mode, build, variant, baseline, no_compare, dry_run))
    except UserError as exc:
        raise _fail(exc) from None


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
        per_cell = cfg.workload.num_requests if cfg.workload.kind == "serving" else len(prompts.prompts)
        view = _ProgressView(progress, len(cells), per_cell)
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


def _verdict(run_path: Path, base_obj: Any, base_name: str | None, run_failed: bool) -> int:
    from mtpbench import compare as cmp
    from mtpbench import report
    from mtpbench.results import load_run

    r = load_run(run_path)
    comp = cmp.compare(r, base_obj, baseline_name=base_name) if base_obj is not None else cmp.analyze(r)
    console.print(report.comparison_renderable(comp, ci=_wide()))
    _print_serving(r)
    code = int(comp.exit_code)
    return int(ExitCode.RUN_FAILED) if run_failed and code == 0 else code


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
        if p.job["workload"]["kind"] == "serving":
            from mtpbench.serving import server_command

            wl = p.job["workload"]
            cmd = server_command(p.python, p.job["model"], 0, p.job["speculative_config"], p.job["engine_args"],
                                 wl["server_args"])  # fmt: skip
            cmd[cmd.index("--port") + 1] = "<free port>"
            console.print(f"  serving: {wl['num_requests']} requests at concurrency {wl['concurrency']}, rate "
                          f"{wl['request_rate'] or 'unlimited'}; the worker starts: {shlex.join(cmd)}",
                          markup=False, highlight=False, soft_wrap=True)  # fmt: skip
    console.print("\ndry run: nothing was started")


# --- show / compare / baseline ------------------------------------------------------------------------


def _print_serving(run: Any) -> None:
    # Serving runs: the load's own table (requests, req/s, latencies, both acceptance definitions).
    from mtpbench import serving_summary as ss

    if ss.is_serving(run):
        console.print(ss.serving_table(ss.summarize_serving(run)))


def _emit(comp: Any, as_json: bool, markdown: bool, junit: Path | None, run: Any = None) -> None:
    from mtpbench import report
    from mtpbench import serving_summary as ss

    serving = ss.summarize_serving(run) if run is not None and ss.is_serving(run) else None
    if junit is not None:
        try:
            junit.write_text(report.comparison_junit(comp), encoding="utf-8")
        except OSError as exc:
            raise UserError(f"{junit}: cannot write JUnit file: {exc}") from None
    if as_json:
        text = report.comparison_json(comp)
        sys.stdout.write((ss.add_to_json(text, serving) if serving else text) + "\n")
    elif markdown:
        sys.stdout.write(report.comparison_markdown(comp) + (("\n" + ss.serving_markdown(serving)) if serving else ""))
    else:
        console.print(report.comparison_renderable(comp, ci=_wide()))
        if serving:
            console.print(ss.serving_table(serving))


@app.command()
def show(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Markdown instead of a table.")] = False,
) -> None:
    """The summary table of a stored run, with the bug signatures that need no baseline."""
    from mtpbench import compare as cmp
    from mtpbench.results import load_run

    try:
        r = load_run(run_dir)
        _emit(cmp.analyze(r), as_json, markdown, None, r)
    except UserError as exc:
        raise _fail(exc) from None


@app.command("compare")
def compare_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    baseline: Annotated[Path, typer.Option(help="Baseline file (baselines/*.yaml).")],
    tolerance: Annotated[float | None, typer.Option(help="Allowed drop per position, points.", min=0)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Markdown for a PR comment.")] = False,
    junit: Annotated[Path | None, typer.Option(help="Also write JUnit XML here.")] = None,
) -> None:
    """Check a run against a baseline; the exit code is the CI gate's verdict."""
    from mtpbench import compare as cmp
    from mtpbench.baseline import load_baseline
    from mtpbench.config import GateSpec
    from mtpbench.results import load_run

    try:
        r = load_run(run_dir)
        b = load_baseline(baseline)
        gate = GateSpec.model_validate(r.manifest["config"].get("gate", {}))
        if tolerance is not None:
            gate = gate.model_copy(update={"tolerance_pts": tolerance})
        comp = cmp.compare(r, b, gate, baseline_name=str(baseline))
        _emit(comp, as_json, markdown, junit, r)
    except UserError as exc:
        raise _fail(exc) from None
    raise typer.Exit(int(comp.exit_code))


@baseline_app.command("save")
def baseline_save(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    out: Annotated[Path, typer.Option(help="Baseline file to write.")],
    name: Annotated[str | None, typer.Option(help="Baseline name (default: the file's stem).")] = None,
    variant: Annotated[str, typer.Option(help="Variant whose cells become the baseline.")] = "stock",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a baseline (per build/mode rates and counts, with provenance) from a run."""
    from mtpbench import compare as cmp
    from mtpbench.baseline import baseline_from_cells, write_baseline
    from mtpbench.results import load_run

    try:
        r = load_run(run_dir)
        cells = [c for c in cmp.collect(r) if c.variant == variant]
        if not cells:
            raise UserError(f"{run_dir}: no cells of variant {variant!r}")
        if any(not c.complete for c in cells):
            raise UserError(f"{run_dir}: some cells did not finish; a baseline must come from a complete run")
        per_cell = [
            (
                c.build,
                c.mode,
                {
                    "num_drafts": c.summary.counts.num_drafts,
                    "num_draft_tokens": c.summary.counts.num_draft_tokens,
                    "num_accepted_tokens": c.summary.counts.num_accepted_tokens,
                    "accepted_per_pos": list(c.summary.counts.accepted_per_pos),
                },
                len(c.repeats),
            )
            for c in cells
        ]
        b = baseline_from_cells(r, name or out.stem, per_cell, variant=variant)
        write_baseline(b, out, force)
    except UserError as exc:
        raise _fail(exc) from None
    console.print(f"wrote {out} ({len(b.entries)} entries from run {r.run_id})")


# --- doctor / selftest -----------------------------------------------------------------------------------


@app.command()
def doctor(
    python: Annotated[str | None, typer.Option(help="Interpreter of the build to check (default: this one).")] = None,
    engine: Annotated[bool, typer.Option(help="Also start an engine on the embedded tiny pair.")] = True,
) -> None:
    """Platform, device, package versions, broken torchvision, and whether an engine starts."""
    from mtpbench import doctor as doc

    checks = doc.checks_from_probe(doc.probe(python))
    style = {"ok": "green", "info": "", "warn": "yellow", "fail": "bold red"}
    t = Table(show_header=True)
    t.add_column("check")
    t.add_column("status")
    t.add_column("detail", overflow="fold")
    for c in checks:
        t.add_row(c.name, f"[{style[c.status]}]{c.status}[/]", c.detail)
    console.print(t)
    failed = any(c.status == "fail" for c in checks)
    if engine and not failed:
        from mtpbench.selftest import engine_check

        with console.status("starting an engine on the embedded tiny pair…"):
            ok, detail = engine_check(python, Path(tempfile.mkdtemp(prefix="mtpbench-doctor-")))
        console.print(f"[{'green' if ok else 'bold red'}]engine {'ok' if ok else 'fail'}[/]: {detail}")
        failed = not ok
    raise typer.Exit(int(ExitCode.RUN_FAILED) if failed else 0)


@app.command()
def selftest(
    out: Annotated[Path, typer.Option(help="Folder for the selftest's run.")] = Path("runs"),
) -> None:
    """Prove the gate has teeth: the embedded pair stock vs the injected flattening fault."""
    from mtpbench import report
    from mtpbench.selftest import run_selftest

    try:
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as progress:
            result = run_selftest(out, lambda total, prompts: _ProgressView(progress, total, prompts))
    except UserError as exc:
        raise _fail(exc) from None
    console.print(report.comparison_renderable(result.comparison, ci=_wide()))
    for line in result.lines:
        console.print(line, markup=False, highlight=False)
    console.print(
        "[bold green]SELFTEST PASS[/]: the gate catches the flattening fault" if result.passed else
        "[bold red]SELFTEST FAIL[/]: the gate did not behave as required"
    )  # fmt: skip
    raise typer.Exit(0 if result.passed else 1)


def main() -> None:
    app()
