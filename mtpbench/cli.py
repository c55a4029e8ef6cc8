"""The `mtpbench` command line: parse, call one library function, render, map the outcome to an exit code.

Exit codes (errors.py, DESIGN.md): 0 pass, 1 regression or bug signature, 2 bad input, 3 run failed or
internal error, 4 not comparable, 5 inconclusive. Every command goes through `_guarded`, the one handler:
a command returns its exit code; a `UserError` becomes one line on stderr and its code; any other
exception becomes one line naming a log file that holds the traceback, and exit 3 — never 1, which
means "regression" to every CI.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import math
import os
import shlex
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

# numpy asks the kernel for transparent huge pages for every large array (madvise) unless told not to,
# once, when it is imported. A command reads a run once and exits: on this project's 2-core VM the kernel's
# compaction for those pages cost 1-2 s of system time over 10⁶ records (`compare` 7.2 s → 5.1 s wall),
# far more than huge pages give back. Only this process: the variable is removed again at once, so the
# workers and servers a run starts inherit the user's own environment.
if "numpy" not in sys.modules and "NUMPY_MADVISE_HUGEPAGE" not in os.environ:
    os.environ["NUMPY_MADVISE_HUGEPAGE"] = "0"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["NUMPY_MADVISE_HUGEPAGE"]

import typer

# typer >= 0.26 vendors click as typer._click and no longer installs click; an older typer depends on click
# and raises click's own exceptions. Either way the exceptions come from what typer brings: mtpbench does not
# import click itself (a core-only install has no click).
try:
    from typer._click import exceptions as _clickx
except ImportError:  # pragma: no cover
    from click import exceptions as _clickx  # type: ignore[no-redef]
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from mtpbench import __version__
from mtpbench.errors import DataWarning, ExitCode, UserError
from mtpbench.render.ci import make_console

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command and group inherits it
    help="Acceptance-rate regression bench and CI gate for speculative decoding on vLLM / vllm-ascend.",
)
baseline_app = typer.Typer(no_args_is_help=True, help="Make baselines from runs.")
app.add_typer(baseline_app, name="baseline")

# Not a terminal (a CI log, a pipe): wide enough that no cell, number or verdict is ever cropped (ci.py).
console = make_console()
err_console = make_console(stderr=True)


def _wide() -> bool:
    # The intervals widen the table past 80 columns: show them where they fit (--json always has them).
    return console.width >= 90


def _say(line: str) -> None:
    err_console.print(line, markup=False, highlight=False, soft_wrap=True)


def _fail(exc: UserError) -> typer.Exit:
    _say(f"mtpbench: error: {exc}")
    return typer.Exit(int(exc.exit_code))


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
    """The one error handler and exit path of every command (asv's main.py pattern): a command returns its
    exit code (or raises typer.Exit); a UserError is one line and its code; anything else is exit 3."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            code = int(fn(*args, **kwargs) or 0)
        except (typer.Exit, typer.Abort, _clickx.ClickException):
            raise
        except UserError as exc:
            _say(f"mtpbench: error: {exc}")
            code = int(exc.exit_code)
        except KeyboardInterrupt as exc:
            # runner.RunInterrupted (a KeyboardInterrupt) carries the signal's code: 130 / 143 / 129.
            where = getattr(exc, "path", None)
            _say("mtpbench: interrupted" + (f"; finished cell-repeats are kept in {where}" if where else ""))
            code = int(getattr(exc, "exit_code", 130))
        except Exception as exc:  # the point: nothing unexpected may exit 1 or show a traceback
            if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
                raise  # stdout closed (`show --json | head`): main()'s quiet exit 3, for every command alike
            first = (str(exc).splitlines() or [""])[0][:300]
            _say(f"mtpbench: internal error: {type(exc).__name__}: {first} ({_crash_log(exc)})")
            code = int(ExitCode.RUN_FAILED)
        raise typer.Exit(code)

    return wrapper


_default_showwarning = warnings.showwarning


def _show_warning(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    # What a loader skipped on purpose (a line cut off by a crash) is one line, like an error.
    if issubclass(category, DataWarning):
        err_console.print(f"mtpbench: warning: {message}", markup=False, highlight=False, soft_wrap=True)
    else:
        _default_showwarning(message, category, *args, **kwargs)


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    warnings.showwarning = _show_warning
    if version:
        console.print(f"mtpbench {__version__}")
        raise typer.Exit(0)


# --- run ------------------------------------------------------------------------------------------------


class _ProgressView:
    """Turns runner events into rich progress: overall cells and prompts, one line per active cell-repeat
    (several at once with --jobs), and one printed line per finished cell-repeat."""

    def __init__(self, progress: Progress, total_cells: int, prompts: int, run_dir_file: Path | None = None) -> None:
        self.p = progress
        self.run_dir_file = run_dir_file
        self.cells = progress.add_task("cells", total=total_cells)
        self.prompts = progress.add_task("prompts", total=total_cells * prompts)
        self.per_cell = prompts
        self.active: dict[int, Any] = {}  # index -> rich task of a running cell-repeat
        self.done_prompts: dict[int, int] = {}

    def __call__(self, kind: str, payload: dict[str, Any]) -> None:
        cell = payload.get("cell")
        idx = int(payload.get("seq", -1))
        label = f"{cell.cell_id} r{cell.repeat} (PYTHONHASHSEED={cell.hash_seed})" if cell is not None else ""
        if kind == "run_start":
            if self.run_dir_file is not None:
                self.run_dir_file.parent.mkdir(parents=True, exist_ok=True)
                self.run_dir_file.write_text(f"{payload['path']}\n", encoding="utf-8")
            self.p.update(self.cells, total=payload.get("cells"))
            self.p.update(self.prompts, total=int(payload.get("cells", 0)) * self.per_cell)
        elif kind == "cell_start":
            devs = payload.get("devices")
            on = f" on {','.join(devs)}" if devs else ""
            self.active[idx] = self.p.add_task(f"  starting {label}{on}", total=self.per_cell)
            self.done_prompts[idx] = 0
        elif kind == "engine_ready" and idx in self.active:
            eff = payload.get("effective", {})
            self.p.update(
                self.active[idx],
                description=f"  {label} engine up in {payload.get('engine_start_s', 0):.1f} s "
                f"(cudagraph_mode {eff.get('cudagraph_mode')})",
            )
        elif kind == "prompt_done":
            self.done_prompts[idx] = self.done_prompts.get(idx, 0) + 1
            self.p.advance(self.prompts)
            if idx in self.active:
                self.p.advance(self.active[idx])
        elif kind == "cell_end":
            if idx in self.active:
                self.p.remove_task(self.active.pop(idx))
            self.p.advance(self.cells)
            missing = self.per_cell - self.done_prompts.pop(idx, 0)
            if missing > 0:
                self.p.advance(self.prompts, missing)
            status = payload.get("status")
            style = "green" if status == "ok" else "red"
            tail = "" if status == "ok" else f": {(str(payload.get('error') or '').splitlines() or [''])[0]}"
            self.p.console.print(
                f"[{style}]{status}[/] {label} in {payload.get('wall_s', 0):.1f} s{tail}", markup=True, highlight=False
            )


_H_CONFIG = "Experiment config (configs/*.yaml); omit with --resume."
_H_RUNDIR = "Write the run folder's path to this file once it exists (CI: gate the run this job made)."
_H_DRY = "List cells, commands, env and the estimated wall time; start nothing."
_H_RESUME = "Finish a stopped run in place: re-run only its unfinished cell-repeats."
_H_JOBS = "Cell-repeats at once, each on its own device(s) (default: the config's jobs, 1)."
_H_DEVICES = "Device pool, e.g. 0,1,2,3 (CPU core sets: '0-3;4-7'); default: the config's, else detected."
_H_RAYRES = "Ray resource one device is: GPU, NPU or CPU (default: from the build's platform)."


@app.command()
@_guarded
def run(
    config: Annotated[Path | None, typer.Argument(help=_H_CONFIG)] = None,
    out: Annotated[Path, typer.Option(help="Folder for run results.")] = Path("runs"),
    repeats: Annotated[int | None, typer.Option(help="Override the config's repeats.", min=1)] = None,
    mode: Annotated[list[str] | None, typer.Option("--mode", help="Only these modes (repeatable).")] = None,
    build: Annotated[list[str] | None, typer.Option("--build", help="Only these builds (repeatable).")] = None,
    variant: Annotated[list[str] | None, typer.Option("--variant", help="Only these variants (repeatable).")] = None,
    baseline: Annotated[Path | None, typer.Option(help="Baseline to compare with (default: the config's).")] = None,
    no_compare: Annotated[bool, typer.Option("--no-compare", help="Only run; print the summary.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help=_H_DRY)] = False,
    resume: Annotated[Path | None, typer.Option(metavar="RUN", help=_H_RESUME)] = None,
    jobs: Annotated[int | None, typer.Option(help=_H_JOBS, min=1)] = None,
    devices: Annotated[str | None, typer.Option(help=_H_DEVICES)] = None,
    executor: Annotated[str | None, typer.Option(help="local or ray (default: the config's, local).")] = None,
    address: Annotated[str | None, typer.Option(help="Ray cluster address (default: RAY_ADDRESS).")] = None,
    ray_resource: Annotated[str | None, typer.Option(help=_H_RAYRES)] = None,
    run_dir_file: Annotated[Path | None, typer.Option(help=_H_RUNDIR)] = None,
) -> None:  # fmt: skip
    """Run every build × mode × variant × repeat in fresh processes, then print the verdict."""
    from mtpbench.run.runner import StopSignals

    # From here on a stop signal is noted, never acted on mid-step: the runner stops its workers and says so.
    with StopSignals() as stops:
        if run_dir_file is not None:
            # A CI step reads this file to gate the run it made: a stale one from an earlier job must not stay.
            run_dir_file.unlink(missing_ok=True)
        code = _run_command(config, out, repeats, mode, build, variant, baseline, no_compare, dry_run, resume,
                            jobs, devices, executor, address, ray_resource, run_dir_file)  # fmt: skip
    if stops.caught and code == 0:
        code = 128 + stops.caught[0]  # a signal while only the verdict was left to print
    raise typer.Exit(code)


def _run_command(config: Path | None, out: Path, repeats: int | None, mode: list[str] | None,
                 build: list[str] | None, variant: list[str] | None, baseline: Path | None, no_compare: bool,
                 dry_run: bool, resume: Path | None, jobs: int | None, devices: str | None, executor: str | None,
                 address: str | None, ray_resource: str | None, run_dir_file: Path | None = None) -> int:  # fmt: skip
    from mtpbench.run.devices import parse_devices
    from mtpbench.run.runner import RunOptions

    try:
        if executor is not None and executor not in ("local", "ray"):
            raise UserError(f"--executor {executor!r}: expected local or ray")
        if ray_resource is not None and ray_resource.upper() not in ("GPU", "NPU", "CPU"):
            raise UserError(f"--ray-resource {ray_resource!r}: expected GPU, NPU or CPU")
        opts = RunOptions(jobs, parse_devices(devices) if devices else None, executor, address,
                          ray_resource.upper() if ray_resource else None)  # fmt: skip
        if resume is not None:
            if config is not None or repeats or mode or build or variant or dry_run:
                raise UserError("--resume RUN takes the run's own config: give no CONFIG, --repeats, --mode, "
                                "--build, --variant or --dry-run with it")  # fmt: skip
            return _resume(resume, opts, baseline, no_compare, run_dir_file)
        if config is None:
            raise UserError("give a CONFIG to run, or --resume RUN")
        return _run(config, out, repeats, mode, build, variant, baseline, no_compare, dry_run, opts, run_dir_file)
    except UserError as exc:
        return _fail(exc).exit_code


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


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def _finished(outcome: Any) -> None:
    from mtpbench.judge.history import refresh_point

    refresh_point(outcome.path)  # the few-kB summary `history` reads per run (the runner judges nothing)
    _render_time(outcome)


def _interrupted(exc: Any) -> int:
    err_console.print(
        f"mtpbench: interrupted by {exc.signal_name}: every worker was stopped; finished cell-repeats are kept in "
        f"{exc.path}\nresume with: mtpbench run --resume {shlex.quote(str(exc.path))}",
        markup=False, highlight=False, soft_wrap=True,
    )  # fmt: skip
    return int(exc.exit_code)


def _run(config: Path, out: Path, repeats: int | None, modes: list[str] | None, builds: list[str] | None,
         variants: list[str] | None, baseline: Path | None, no_compare: bool, dry_run: bool,
         opts: Any = None, run_dir_file: Path | None = None) -> int:  # fmt: skip
    from mtpbench.config import load_config, load_prompts
    from mtpbench.run import runner
    from mtpbench.store.results import ensure_out_dir

    cfg = load_config(config)
    _select(cfg, repeats, modes, builds, variants)
    prompts = load_prompts(cfg.prompts)
    base = baseline or (Path(cfg.baseline) if cfg.baseline else None)
    base_obj = None
    if base is not None and not no_compare and not dry_run:
        from mtpbench.store.baseline import load_baseline

        base_obj = load_baseline(base)  # bad baseline: refuse before spending minutes on engines
    cells = runner.expand(cfg)
    opts = opts or runner.RunOptions()
    if dry_run:
        plans = runner.plan(cfg, prompts, cells, "DRY-RUN", str(out / "<run>" / "records.jsonl"))
        _render_dry_run(cfg, prompts, plans)
        if base is not None:
            _render_config_sizing(cfg, cells, base, len(prompts.prompts))
        jobs, ex = opts.jobs or cfg.jobs, opts.executor or cfg.executor
        _render_estimate(runner.estimate(cfg, cells, out, jobs, ex), cfg.name, out, jobs, ex)
        return 0
    ensure_out_dir(out)
    with _progress() as progress:
        per_cell = cfg.workload.num_requests if cfg.workload.kind == "serving" else len(prompts.prompts)
        view = _ProgressView(progress, len(cells), per_cell, run_dir_file)
        try:
            outcome = runner.execute(cfg, prompts, out, str(config), cells, view, opts)
        except runner.RunInterrupted as exc:
            progress.stop()
            return _interrupted(exc)
    _finished(outcome)
    return _verdict(outcome.path, base_obj, str(base) if base else None, run_failed=bool(outcome.failed))


def _resume(run_dir: Path, opts: Any, baseline: Path | None, no_compare: bool,
            run_dir_file: Path | None = None) -> int:  # fmt: skip
    from mtpbench.run import runner

    manifest, cfg, prompts = runner.load_for_resume(run_dir)
    base = baseline or (Path(cfg.baseline) if cfg.baseline else None)
    base_obj = None
    if base is not None and not no_compare:
        from mtpbench.store.baseline import load_baseline

        base_obj = load_baseline(base)
    todo = sum(1 for c in manifest["cells"] if c.get("status", "pending") in runner.RERUN)
    console.print(f"resuming {run_dir}: {todo} of {len(manifest['cells'])} cell-repeats to run", highlight=False)
    with _progress() as progress:
        per_cell = cfg.workload.num_requests if cfg.workload.kind == "serving" else len(prompts.prompts)
        view = _ProgressView(progress, todo, per_cell, run_dir_file)
        try:
            outcome = runner.resume(run_dir, view, opts)
        except runner.RunInterrupted as exc:
            progress.stop()
            return _interrupted(exc)
    _finished(outcome)
    return _verdict(outcome.path, base_obj, str(base) if base else None, run_failed=bool(outcome.failed))


def _render_time(outcome: Any) -> None:
    from mtpbench.run.runner import time_breakdown

    t = time_breakdown(outcome.manifest)
    other = max(t["worker_s"] - t["startup_s"] - t["generation_s"], 0.0)
    console.print(
        f"results: {outcome.path}\n"
        f"time: {t['run_wall_s']:.1f} s wall for {int(t['cells'])} cell-repeats; in workers {t['worker_s']:.1f} s = "
        f"start-up {t['startup_s']:.1f} s (engine {t['engine_start_s']:.1f} s) + generation {t['generation_s']:.1f} s"
        f" + exit {other:.1f} s; waiting for a device {t['queued_s']:.1f} s (summed over cell-repeats); "
        f"device slots busy {100 * t['utilisation']:.0f} %",
        highlight=False,
    )


def _render_estimate(est: Any, name: str, out: Path, jobs: int, executor: str) -> None:
    if est is None:
        console.print(f"estimate: no earlier runs of {name} in {out} to estimate the wall time from", highlight=False)
        return
    console.print(
        f"estimate: about {est.wall_s:.0f} s wall with --executor {executor} --jobs {jobs} "
        f"(from {est.runs} earlier run(s) of {name} in {out}: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in est.per_cell_s.items())
        + " per cell-repeat; parallel jobs that share CPU cores run slower than this assumes)",
        highlight=False, soft_wrap=True,
    )  # fmt: skip


def _verdict(
    run_path: Path, base_obj: Any, base_name: str | None, run_failed: bool, *, allow_unmatched: bool = False,
    accept_unchecked: bool = False,
) -> int:  # fmt: skip
    """The verdict at the end of `run`: the same comparison and exit code as `compare` (or `show`)."""
    from mtpbench.judge import compare as cmp
    from mtpbench.render import report
    from mtpbench.store.results import load_run

    r = load_run(run_path)
    if base_obj is None:
        comp = cmp.analyze(r, run_failed=run_failed)
    else:
        comp = cmp.compare(r, base_obj, baseline_name=base_name, baseline_path=base_name, run_failed=run_failed,
                           allow_unmatched=allow_unmatched, accept_unchecked=accept_unchecked)  # fmt: skip
    _print_unapplied_fix(r.cell_starts())
    console.print(report.comparison_renderable(comp, ci=_wide()))
    _print_serving(r)
    _github(comp, False)
    return int(comp.exit_code)


def _print_unapplied_fix(cell_starts: list[dict[str, Any]]) -> None:
    from rich.text import Text

    from mtpbench.fixes.status import headline

    top = headline(cell_starts)
    if top:
        console.print(Text(top, style="bold red"), soft_wrap=True)


def _render_preflight(checks: list[Any]) -> None:
    from rich.text import Text

    for pf in checks:
        console.print(Text(pf.line, style="bold red" if pf.applies is False else "dim"), soft_wrap=True)


def _render_config_sizing(cfg: Any, cells: list[Any], base: Path, prompts: int) -> None:
    from mtpbench.judge.sizing import family_of_config, size_entry
    from mtpbench.render.sizingreport import sizing_table
    from mtpbench.store.baseline import load_baseline

    ref = cfg.reference_mode or next((m for m, s in cfg.modes.items()
                                      if s.enforce_eager or s.cudagraph_mode == "NONE"), None)  # fmt: skip
    family = family_of_config(cfg.speculative.num_speculative_tokens,
                              [(c.build, c.mode, c.variant) for c in cells], ref)  # fmt: skip
    sizes = [s for e in load_baseline(base).entries if (s := size_entry(e, cfg.gate, family)) is not None]
    console.print(sizing_table(sizes, cfg.gate, prompts))


def _render_dry_run(cfg: Any, prompts: Any, plans: list[Any]) -> None:
    from mtpbench.fixes.status import preflight

    # Said first and again last, so neither the head nor the tail of a long listing hides an unapplied fix.
    checks = preflight(plans)
    _render_preflight(checks)
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
            from mtpbench.engine.serving import server_command

            wl = p.job["workload"]
            policy = wl.get("per_request_metrics", "auto")
            cmd = server_command(p.python, p.job["model"], 0, p.job["speculative_config"], p.job["engine_args"],
                                 wl["server_args"], policy != "off")  # fmt: skip
            cmd[cmd.index("--port") + 1] = "<free port>"
            again = " (auto: once more without the flag if the build refuses it)" if policy == "auto" else ""
            console.print(f"  serving: {wl['num_requests']} requests at concurrency {wl['concurrency']}, rate "
                          f"{wl['request_rate'] or 'unlimited'}; the worker starts: {shlex.join(cmd)}{again}",
                          markup=False, highlight=False, soft_wrap=True)  # fmt: skip
    if checks:
        console.print("\npreflight (each build's interpreter imported what the variants' patches target):")
        _render_preflight(checks)
    console.print("\ndry run: nothing was started" + (" but the preflight probes above (no engine, no worker)"
                                                       if checks else ""))  # fmt: skip


# --- show / compare / baseline ------------------------------------------------------------------------


def _print_serving(run: Any) -> None:
    # Serving runs: the load's own table (requests, req/s, latencies, both acceptance definitions).
    from mtpbench.judge import serving_summary as ss

    if ss.is_serving(run):
        console.print(ss.serving_table(ss.summarize_serving(run)))


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot write JUnit file: {exc}") from None


def _emit(comp: Any, as_json: bool, markdown: bool, junit: Path | None, run: Any = None) -> int:
    """Render a comparison in the asked format (and JUnit beside it); its exit code, the one every format shows."""
    from mtpbench.judge import serving_summary as ss
    from mtpbench.render import report

    serving = ss.summarize_serving(run) if run is not None and ss.is_serving(run) else None
    if junit is not None:
        _write(junit, report.comparison_junit(comp))
    if as_json:
        text = report.comparison_json(comp)
        sys.stdout.write((ss.add_to_json(text, serving) if serving else text) + "\n")
    elif markdown:
        sys.stdout.write(report.comparison_markdown(comp) + (("\n" + ss.serving_markdown(serving)) if serving else ""))
    else:
        console.print(report.comparison_renderable(comp, ci=_wide()))
        if serving:
            console.print(ss.serving_table(serving))
    return int(comp.exit_code)


@app.command()
@_guarded
def show(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Markdown instead of a table.")] = False,
) -> int:
    """The summary table of a stored run and the bug signatures that need no baseline; exits with their verdict."""
    from mtpbench.judge import compare as cmp
    from mtpbench.store.results import load_run

    _check_options(None, None, as_json, markdown)
    r = load_run(run_dir)
    return _emit(cmp.analyze(r), as_json, markdown, None, r)


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
        _make_parent(junit, "--junit")


def _make_parent(path: Path, what: str) -> None:
    """Every output file's folder is made if missing (as report, history and run make theirs)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot create the folder {path.parent}: {exc.strerror or exc}") from None


# How a run is judged: the same options for `compare` (the gate) and `report` (which shows its verdict).
ToleranceOpt = Annotated[float | None, typer.Option(help="Allowed drop per position, points (>= 0).")]
AllowUnmatchedOpt = Annotated[
    bool, typer.Option("--allow-unmatched", help="A cell with no baseline entry warns instead of exit 4.")
]
AcceptUncheckedOpt = Annotated[
    bool, typer.Option("--accept-unchecked", help="Use a baseline that cannot check the model, drafter or prompts.")
]
FailUnderpoweredOpt = Annotated[
    bool, typer.Option("--fail-underpowered", help="Exit 5 when a cell could not detect a tolerance-sized drop.")
]


def _judge(r: Any, baseline: Path | None, tolerance: float | None = None, allow_unmatched: bool = False,
           accept_unchecked: bool = False, fail_underpowered: bool = False, measured: Any = None) -> Any:  # fmt: skip
    """The run's Comparison under the config's gate with the command line's changes; without a baseline,
    the signatures that need none."""
    from mtpbench.config import GateSpec
    from mtpbench.judge import compare as cmp
    from mtpbench.store.baseline import load_baseline

    b = None if baseline is None else load_baseline(baseline)
    gate = GateSpec.model_validate(r.manifest["config"].get("gate", {}))
    if tolerance is not None:
        gate = gate.model_copy(update={"tolerance_pts": tolerance})
    if fail_underpowered:
        gate = gate.model_copy(update={"fail_on_underpowered": True})
    if b is None:
        return cmp.analyze(r, gate, measured=measured)
    return cmp.compare(r, b, gate, baseline_name=str(baseline), baseline_path=baseline, allow_unmatched=allow_unmatched,
                       accept_unchecked=accept_unchecked, measured=measured)  # fmt: skip


@app.command("compare")
@_guarded
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
    """Check a run against a baseline; the exit code is the CI gate's verdict."""
    from mtpbench.errors import NotComparableError
    from mtpbench.render import report
    from mtpbench.store.results import load_run

    _check_options(tolerance, junit, as_json, markdown)
    r = load_run(run_dir)
    try:
        comp = _judge(r, baseline, tolerance, allow_unmatched, accept_unchecked, fail_underpowered)
    except NotComparableError as exc:
        # CI still reads a document: the same verdict as the exit code, in every format asked for.
        if junit is not None:
            _write(junit, report.not_comparable_junit(exc))
        if as_json:
            sys.stdout.write(report.not_comparable_json(exc) + "\n")
        raise
    code = _emit(comp, as_json, markdown, junit, r)
    _github(comp, github)
    return code


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
    from mtpbench.judge.save import baseline_of_run
    from mtpbench.store.baseline import write_baseline
    from mtpbench.store.results import load_run

    r = load_run(run_dir)
    b = baseline_of_run(r, name or out.stem, variant)
    _make_parent(out, "--out")
    write_baseline(b, out, force)
    console.print(f"wrote {out} ({len(b.entries)} entries from run {r.run_id})", markup=False, highlight=False)
    return 0


# --- doctor / selftest -----------------------------------------------------------------------------------

DOCTOR_STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red"}


@app.command()
@_guarded
def doctor(
    python: Annotated[str | None, typer.Option(help="Interpreter of the build to check (default: this one).")] = None,
    engine: Annotated[bool, typer.Option(help="Also start an engine on the embedded tiny pair.")] = True,
) -> int:
    """Platform, device, package versions, broken torchvision, and whether an engine starts."""
    from mtpbench.run import doctor as doc

    info = doc.probe(python)
    if python and "probe" in info.get("errors", {}):
        raise UserError(f"--python {python}: not a usable interpreter: {info['errors']['probe']}")
    checks = doc.checks_from_probe(info)
    t = Table(show_header=True)
    t.add_column("check")
    t.add_column("status")
    t.add_column("detail", overflow="fold")
    for c in checks:
        # Text, not markup: a detail may hold brackets (and an empty style once rendered "[]info[/]").
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
    from mtpbench.render import report
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


# --- report / history (HTML, PNG, trend across runs) -------------------------------------------------------


def _check_report_paths(html: Path | None, png: Path | None) -> None:
    """Outputs that cannot be written, named before a big run is loaded and judged, not after."""
    from mtpbench.config import path_kind

    if html is not None and path_kind(html, "--html") == "dir":
        raise UserError(f"--html {html}: is a folder, not a file")
    if png is not None and path_kind(png, "--png") in ("file", "other"):
        raise UserError(f"--png {png}: is a file, not a folder")


# The report exits 0 once written: its judging options change the verdict it shows, not its exit code.
_H_UNMATCHED_VERDICT = "A cell with no baseline entry warns instead of making the verdict not comparable."
_H_UNDERPOWERED_VERDICT = "A cell that could not detect a tolerance-sized drop makes the verdict inconclusive."


@app.command("size")
@_guarded
def size(
    baseline: Annotated[Path, typer.Argument(help="A baseline with per-prompt counts (baseline save keeps them).")],
    pilot: Annotated[Path | None, typer.Option("--run", help="A pilot run: size from its paired spread.")] = None,
    checks: Annotated[int, typer.Option(help="Checks the run makes (k per cell, k per graph cell).", min=1)] = 6,
    tolerance: Annotated[float | None, typer.Option(help="δ, points (default: the gate's).", min=0)] = None,
) -> int:
    """How many prompts the gate needs to certify no drop of δ at each position (exit 0; 2 on bad input)."""
    from mtpbench.config import GateSpec
    from mtpbench.judge.sizing import size_entry, size_pilot
    from mtpbench.render.sizingreport import sizing_table
    from mtpbench.store.baseline import load_baseline

    b = load_baseline(baseline)
    if pilot is not None:
        from mtpbench.judge.compare import compare
        from mtpbench.store.results import load_run

        run = load_run(pilot)
        gate = run.typed.config.gate
        gate = gate if tolerance is None else gate.model_copy(update={"tolerance_pts": tolerance})
        comp = compare(run, b, gate, str(baseline), baseline_path=baseline, accept_unchecked=True)
        console.print(sizing_table(size_pilot(comp), comp.gate, None))
        return 0
    gate = GateSpec() if tolerance is None else GateSpec(tolerance_pts=tolerance)
    console.print(sizing_table([s for e in b.entries if (s := size_entry(e, gate, checks)) is not None], gate))
    return 0


@app.command("report")
@_guarded
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

    try:
        if html is None and png is None:
            raise UserError("report: give --html FILE and/or --png DIR")
        _check_options(tolerance, None)
        _check_report_paths(html, png)
        plots.check_installed()  # before a big run is loaded, not after
        # The figures are drawn by a second process while this one imports, loads and judges the run
        # (painter.py): started before the heavy imports, so that its own overlap them.
        with Painter.start() as painter:
            from mtpbench.render import htmlreport
            from mtpbench.store.results import load_run

            figures = htmlreport.Figures(painter, html is not None, png)
            r = load_run(run_dir)
            comp = _judge(r, baseline, tolerance, allow_unmatched, accept_unchecked, fail_underpowered,
                          measured=functools.partial(figures.measured, r))  # fmt: skip
            out = htmlreport.write_report(r, comp, html, png, figures)
    except UserError as exc:
        raise _fail(exc) from None
    for path in [out.html_path, *out.pngs]:
        if path is not None:
            console.print(f"wrote {path}", highlight=False, soft_wrap=True)


def _github(comp: Any, flag: bool) -> None:
    """Under GitHub Actions (or --github): Markdown verdict to the step summary, failing checks as ::error."""
    from mtpbench.render import ci, report

    if not ci.github_enabled(flag):
        return
    lines, note = ci.publish(comp, report.comparison_markdown(comp))
    for line in lines:  # workflow commands are read from stdout, one per line, never wrapped
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if note:
        err_console.print(f"mtpbench: {note}", markup=False, highlight=False)


@app.command("history")
@_guarded
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

    try:
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
    except UserError as exc:
        raise _fail(exc) from None


def main() -> None:
    """The console script. typer's standalone mode would print a usage error (an unknown option, a missing
    argument, a bad value) as a boxed multi-line panel; bad input is one line and exit 2 here, like every
    other error of mtpbench, and no click exception can exit 1 ("regression" to every CI)."""
    try:
        code = app(standalone_mode=False)
        sys.stdout.flush()  # what a command left buffered meets a closed pipe here, not at interpreter exit
    except _clickx.NoArgsIsHelpError:  # `mtpbench` or `mtpbench baseline` alone: the help, then exit 2
        with contextlib.suppress(SystemExit):
            app([*sys.argv[1:], "--help"])
        code = int(ExitCode.USAGE)
    except _clickx.ClickException as exc:
        where = exc.ctx.command_path if isinstance(exc, _clickx.UsageError) and exc.ctx else "mtpbench"
        _say(f"mtpbench: error: {exc.format_message()} (see: {where} --help)")
        code = int(ExitCode.USAGE)
    except typer.Abort:
        _say("mtpbench: aborted")
        code = int(ExitCode.RUN_FAILED)
    except SystemExit as exc:
        # The one handler of a closed stdout (`mtpbench show --json | head`), in a command or outside one
        # (`--help | head`): typer and rich turn the broken pipe into a silent sys.exit(1), which is not a
        # regression but output that could not be written: exit 3. Anything else that exits keeps its code.
        ctx = exc.__context__
        if exc.code == 1 and isinstance(ctx, OSError) and ctx.errno == errno.EPIPE:
            code = int(ExitCode.RUN_FAILED)
        else:
            raise
    except BrokenPipeError:  # the flush above: the same closed stdout; the interpreter's own flush goes nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = int(ExitCode.RUN_FAILED)
    # At exit the interpreter's last garbage collections walk every object still alive (pandas, pyarrow,
    # a loaded run): 0.15-0.3 s of every command on a 2-core box, measured. Nothing is left that only a
    # collection would free or finish (files are closed, workers reaped; atexit and weakref finalizers run).
    gc.freeze()
    sys.exit(code if isinstance(code, int) else 0)
