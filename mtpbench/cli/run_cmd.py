"""`mtpbench run` and `mtpbench run --resume`: check the options, narrow the config to the cells asked for,
hand the cells to the runner (run/runner.py) with the progress view, then print the time spent and the same
verdict `compare` (or `show`) would give, through the same `judge_run`, with its exit code. A run and a
resumed run share their tail (`_execute`): the progress view, the run, then the history point, the time
spent and the verdict, all from one collection of the run's evidence. `--dry-run` starts nothing
(cli/dry_run.py).

run/, judge/, store/ and config are imported inside the functions (or under TYPE_CHECKING): they bring
pydantic, pandas and scipy, which `mtpbench --help` must not pay for.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from mtpbench.cli.common import console, err_console, publish_github, say
from mtpbench.cli.dry_run import (
    blocking_models,
    model_statuses,
    render_blocked,
    render_build_states,
    render_config_sizing,
    render_dry_run,
    render_estimate,
    render_role,
)
from mtpbench.cli.judge_cmds import emit, judge_run
from mtpbench.cli.progress import ProgressView, install_view, progress_bars
from mtpbench.errors import ExitCode, PinError, ProvisionError, UserError
from mtpbench.run.bisect import GIT_BISECT_SKIP, git_bisect_code

if TYPE_CHECKING:
    from mtpbench.config import ExperimentConfig, PromptSet
    from mtpbench.judge.evidence import Evidence
    from mtpbench.run.cells import RunOutcome
    from mtpbench.run.control import RunInterrupted, RunOptions
    from mtpbench.store.baseline import Baseline
    from mtpbench.store.results import Run

__all__ = ["run", "verdict"]

_H_CONFIG = "Experiment config (configs/*.yaml); omit with --resume."
_H_RUNDIR = "Write the run folder's path to this file once it exists (CI: gate the run this job made)."
_H_DRY = "List cells, commands, env and the estimated wall time; start nothing."
_H_RESUME = "Finish a stopped run in place: re-run only its unfinished cell-repeats."
_H_JOBS = "Cell-repeats at once, each on its own device(s) (default: the config's jobs, 1)."
_H_DEVICES = "Device pool, e.g. 0,1,2,3 (CPU core sets: '0-3;4-7'); default: the config's, else detected."
_H_ADDRESS = "Ray cluster HOST:PORT (default: the config's, else RAY_ADDRESS; none: a cluster of its own on 127.0.0.1)."
_H_RAYRES = "Ray resource one device is: GPU, NPU or CPU (default: from the build's platform)."
_H_GIT_BISECT = "Exit as `git bisect run` reads it: 0 good, 1 bad, 125 cannot test (install or engine failed)."


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
    address: Annotated[str | None, typer.Option(help=_H_ADDRESS)] = None,
    ray_resource: Annotated[str | None, typer.Option(help=_H_RAYRES)] = None,
    run_dir_file: Annotated[Path | None, typer.Option(help=_H_RUNDIR)] = None,
    git_bisect: Annotated[bool, typer.Option("--git-bisect", help=_H_GIT_BISECT)] = False,
) -> None:
    """Run every build × mode × variant × repeat in fresh processes, then print the verdict."""
    from mtpbench.run.runner import StopSignals

    # From here on a stop signal is noted, never acted on mid-step: the runner stops its workers and says so.
    with StopSignals() as stops:
        if run_dir_file is not None:
            # A CI step reads this file to gate the run it made: a stale one from an earlier job must not stay.
            run_dir_file.unlink(missing_ok=True)
        try:
            code = _run_command(
                config,
                out,
                repeats,
                mode,
                build,
                variant,
                baseline,
                no_compare,
                dry_run,
                resume,
                jobs,
                devices,
                executor,
                address,
                ray_resource,
                run_dir_file,
            )
        except UserError as exc:
            if not git_bisect:
                raise
            say(f"mtpbench: error: {exc}")
            # A build this commit cannot install is untested, not bad input: git bisect skips the commit.
            untestable = isinstance(exc, PinError | ProvisionError)
            raise typer.Exit(GIT_BISECT_SKIP if untestable else git_bisect_code(exc.exit_code)) from None
    if stops.caught and code == 0:
        code = 128 + stops.caught[0]  # a signal while only the verdict was left to print
    if git_bisect and code in set(ExitCode):
        code = git_bisect_code(ExitCode(code))
    raise typer.Exit(code)


def _run_command(
    config: Path | None,
    out: Path,
    repeats: int | None,
    mode: list[str] | None,
    build: list[str] | None,
    variant: list[str] | None,
    baseline: Path | None,
    no_compare: bool,
    dry_run: bool,
    resume: Path | None,
    jobs: int | None,
    devices: str | None,
    executor: str | None,
    address: str | None,
    ray_resource: str | None,
    run_dir_file: Path | None = None,
) -> int:
    from mtpbench.run.devices import parse_devices
    from mtpbench.run.runner import RunOptions

    if executor is not None and executor not in ("local", "ray"):
        raise UserError(f"--executor {executor!r}: expected local or ray")
    if ray_resource is not None and ray_resource.upper() not in ("GPU", "NPU", "CPU"):
        raise UserError(f"--ray-resource {ray_resource!r}: expected GPU, NPU or CPU")
    opts = RunOptions(
        jobs,
        parse_devices(devices) if devices else None,
        executor,
        address,
        ray_resource.upper() if ray_resource else None,
    )
    if resume is not None:
        if config is not None or repeats or mode or build or variant or dry_run:
            raise UserError(
                "--resume RUN takes the run's own config: give no CONFIG, --repeats, --mode, "
                "--build, --variant or --dry-run with it"
            )
        return _resume(resume, opts, baseline, no_compare, run_dir_file)
    if config is None:
        raise UserError("give a CONFIG to run, or --resume RUN")
    return _run(config, out, repeats, mode, build, variant, baseline, no_compare, dry_run, opts, run_dir_file)


def _select(
    cfg: ExperimentConfig,
    repeats: int | None,
    modes: list[str] | None,
    builds: list[str] | None,
    variants: list[str] | None,
) -> None:
    for axis, chosen in (("modes", modes), ("builds", builds), ("variants", variants)):
        have = getattr(cfg, axis)
        for name in chosen or []:
            if name not in have:
                raise UserError(f"--{axis[:-1]} {name!r}: not in the config's {axis} ({', '.join(have)})")
        if chosen:
            setattr(cfg, axis, {k: v for k, v in have.items() if k in chosen})
    if cfg.reference_build is not None and cfg.reference_build not in cfg.builds:
        # --build left the reference build out: the run's builds are held against its first (judge/signals/builds.py).
        cfg.reference_build = None
    if repeats is not None:
        seeds = cfg.seeds()
        cfg.hash_seeds = seeds[:repeats] if repeats <= len(seeds) else [*seeds, *range(len(seeds), repeats)]
        cfg.repeats = repeats


def _interrupted(exc: RunInterrupted) -> int:
    if exc.path is None:  # while a Ray cluster was started or reached: no run folder, nothing to resume
        text = (
            f"mtpbench: interrupted by {exc.signal_name} before any cell-repeat ran (while starting or joining "
            "the Ray cluster); no run folder was made"
        )
    else:
        text = (
            f"mtpbench: interrupted by {exc.signal_name}: every worker was stopped; finished cell-repeats are "
            f"kept in {exc.path}\nresume with: mtpbench run --resume {shlex.quote(str(exc.path))}"
        )
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)
    return int(exc.exit_code)


def _run(
    config: Path,
    out: Path,
    repeats: int | None,
    modes: list[str] | None,
    builds: list[str] | None,
    variants: list[str] | None,
    baseline: Path | None,
    no_compare: bool,
    dry_run: bool,
    opts: RunOptions | None = None,
    run_dir_file: Path | None = None,
) -> int:
    from mtpbench.config import config_prompts, load_config
    from mtpbench.run import runner
    from mtpbench.run.envs.builds import preview_builds, resolve_builds
    from mtpbench.store.manifest import ensure_out_dir

    cfg = load_config(config)
    _select(cfg, repeats, modes, builds, variants)
    prompts = config_prompts(cfg)
    base_path, base_obj = _baseline_of(cfg, baseline, no_compare)  # a dry run refuses what the run would
    cells = runner.expand(cfg)
    opts = opts or runner.RunOptions()
    if dry_run:
        # Builds from pins as they will run, from the cache or installed when the run starts: nothing here.
        cfg, states = preview_builds(cfg)
        plans = runner.cell_jobs(cfg, prompts, cells, "DRY-RUN", str(out / "<run>" / "records.jsonl"))
        render_dry_run(cfg, prompts, plans)
        render_build_states(cfg, states)
        base = baseline or (Path(cfg.baseline) if cfg.baseline else None)
        render_config_sizing(cfg, cells, base, len(prompts.prompts))
        render_role(cfg, len(prompts.prompts))
        jobs, ex = opts.jobs or cfg.jobs, opts.executor or cfg.executor
        render_estimate(runner.estimate(cfg, cells, out, jobs, ex), cfg.name, out, jobs, ex)
        blocked = blocking_models(cfg, ex)
        if blocked:  # a CI preflight (`run --dry-run`) of a config that cannot start must fail, not pass
            render_blocked(blocked)
            return int(ExitCode.USAGE)
        _refuse_missing_library(config, cfg, ex)
        return 0
    placeholder = next((v for what, v, st in model_statuses(cfg) if st == "placeholder"), None)
    if placeholder is not None:  # a shipped config's /path/to/...: bad input, not a failed engine (exit 3)
        raise UserError(
            f"{config}: {placeholder!r} is a placeholder: set the model and drafter first (--dry-run shows both)"
        )
    _refuse_missing_paths(config, cfg, opts.executor or cfg.executor)
    if cfg.reference_replay:
        from mtpbench.reference.compute import lookup_rule
        from mtpbench.reference.pair import check_pair

        # A pair or a lookup's settings the reference does not model are refused now, not after minutes of engines.
        check_pair(cfg.model, cfg.speculative.model, cfg.speculative.method)
        rule = lookup_rule(cfg.speculative.method, cfg.speculative.extra)
        if getattr(rule, "max_cached_requests", 0) and cfg.prompt_mode != "sequential":
            raise UserError(
                f"{config}: reference_replay: suffix decoding's cross-request cache is on and the prompts are "
                "batched; the reference replays that cache for prompts served one at a time (prompt_mode: "
                "sequential), or set speculative.extra.suffix_decoding_max_cached_requests to 0"
            )
    _need_ray(opts.executor or cfg.executor)
    ensure_out_dir(out)
    # The one place builds from pins get their environments (cached, or installed now: one line per step).
    with install_view() as view:
        cfg, _ = resolve_builds(cfg, on_step=view.step, on_output=view.output)
    _refuse_missing_library(config, cfg, opts.executor or cfg.executor)
    return _execute(
        len(cells),
        cfg,
        prompts,
        run_dir_file,
        lambda view: runner.execute(cfg, prompts, out, str(config), cells, view, opts),
        base_path,
        base_obj,
    )


def _resume(
    run_dir: Path, opts: RunOptions, baseline: Path | None, no_compare: bool, run_dir_file: Path | None = None
) -> int:
    from mtpbench.run import runner

    stored = runner.load_for_resume(run_dir)
    cfg = stored.cfg
    _need_ray(opts.executor or cfg.executor)
    base_path, base_obj = _baseline_of(cfg, baseline, no_compare)
    todo = len(stored.todo)
    console.print(f"resuming {run_dir}: {todo} of {len(stored.typed.cells)} cell-repeats to run", highlight=False)
    return _execute(
        todo, cfg, stored.prompts, run_dir_file, lambda view: runner.resume(run_dir, view, opts), base_path, base_obj
    )


def _refuse_missing_paths(config: Path, cfg: ExperimentConfig, executor: str) -> None:
    """A model or drafter written as a local path (/…, ./…, ../…, ~…) that names nothing here is bad input
    before the run folder exists, as the dry run says, not a failed engine minutes later (exit 3). A bare name
    may still be one vLLM resolves, and under Ray a path may exist on the cluster's nodes only."""
    for what, value, status in blocking_models(cfg, executor):
        if status == "missing" and value and value.startswith(("/", "./", "../", "~")):
            raise UserError(f"{config}: {what} {value!r}: no such file or folder here (--dry-run lists both)")


def _refuse_missing_library(config: Path, cfg: ExperimentConfig, executor: str) -> None:
    """A build whose interpreter lacks what the method imports beside vLLM (suffix: arctic-inference) is bad
    input in one line, not an engine that fails at start-up. Under Ray the cells run on the cluster's nodes,
    whose environments this host cannot look into."""
    from mtpbench.run.envs.builds import missing_method_library

    why = None if executor == "ray" else missing_method_library(cfg)
    if why is not None:
        raise UserError(f"{config}: {why}")


def _need_ray(executor: str) -> None:
    """Ray missing is bad input said in one line before anything starts: the executor's own import of it
    comes after the run folder and the progress bars (issue 30)."""
    import importlib.util

    # find_spec, not an import: Ray takes seconds to import and the executor imports it anyway.
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        raise UserError("--executor ray needs Ray, which this environment lacks: pip install 'mtpbench[ray]'")


def _baseline_of(cfg: ExperimentConfig, baseline: Path | None, no_compare: bool) -> tuple[Path | None, Baseline | None]:
    """The baseline the run is judged by (the option's, else the config's; none with --no-compare), loaded now:
    a bad baseline is refused before minutes are spent on engines."""
    from mtpbench.store.baseline import load_baseline

    base = baseline or (Path(cfg.baseline) if cfg.baseline else None)
    if base is None or no_compare:
        return None, None
    loaded = load_baseline(base)
    _refuse_other_speculation(cfg, base, loaded)
    return base, loaded


def _refuse_other_speculation(cfg: ExperimentConfig, path: Path, baseline: Baseline) -> None:
    """A baseline of another method, k or method settings cannot judge this config's run: not comparable
    (exit 4) now, in one line, rather than after every engine has run."""
    from mtpbench.errors import NotComparableError
    from mtpbench.judge.checks import speculative_mismatches

    spec = cfg.speculative
    mismatches = speculative_mismatches(spec.method, spec.num_speculative_tokens, spec.extra, baseline.fingerprint, [])
    if mismatches:
        raise NotComparableError(
            f"{cfg.name} is not comparable with baseline {path}: {'; '.join(mismatches)}; nothing was run "
            "(--no-compare runs it unjudged)",
            "",
            str(path),
            mismatches,
        )


def _execute(
    cell_repeats: int,
    cfg: ExperimentConfig,
    prompts: PromptSet,
    run_dir_file: Path | None,
    start: Callable[[ProgressView], RunOutcome],
    base_path: Path | None,
    base_obj: Baseline | None,
) -> int:
    """The tail `run` and `run --resume` share: the cell-repeats under the progress view, then the history
    point, the time spent and the verdict, from one load of the run and one collection of its evidence."""
    from mtpbench.judge.evidence import collect_evidence
    from mtpbench.judge.history import refresh_point
    from mtpbench.run.runner import RunInterrupted
    from mtpbench.store.results import load_run

    with progress_bars() as progress:
        view = ProgressView(progress, cell_repeats, _prompts_per_cell(cfg, len(prompts.prompts)), run_dir_file)
        try:
            outcome = start(view)
        except RunInterrupted as exc:
            progress.stop()
            return _interrupted(exc)
    run = load_run(outcome.path)
    if cfg.reference_replay and not outcome.failed:
        _replay_reference(run)
    evidence = collect_evidence(run, run.typed.config.gate.confidence)
    refresh_point(outcome.path, run, evidence)  # the few-kB summary `history` reads per run
    _render_time(outcome)
    return verdict(run, base_obj, str(base_path) if base_path else None, bool(outcome.failed), evidence=evidence)


def _replay_reference(run: Run) -> None:
    """The config's `reference_replay`: the run's prompts replayed from the weights (`mtpbench reference`),
    stored beside it, so that the verdict below also holds the engine against them."""
    from mtpbench.cli.progress import replay_bar
    from mtpbench.reference import ReferenceOptions, compute_reference

    with replay_bar(console) as progress:
        ref = compute_reference(run, ReferenceOptions(), progress)
    console.print(
        f"reference: {len(ref.prompts)} prompt lines replayed from the weights in {ref.wall_s or 0:.1f} s "
        f"({run.path / 'reference.jsonl'})",
        highlight=False,
    )


def _render_time(outcome: RunOutcome) -> None:
    from mtpbench.render.words.runtime import time_text
    from mtpbench.run.runner import time_breakdown

    console.print(time_text(str(outcome.path), time_breakdown(outcome.manifest)), highlight=False)


def verdict(
    run: Run | Path,
    base_obj: Baseline | None,
    base_name: str | None,
    run_failed: bool,
    *,
    evidence: Evidence | None = None,
) -> int:
    """The verdict at the end of `run`: the same judging and exit code as `compare` (or `show`, without a
    baseline), and a serving run's load table."""
    from mtpbench.store.results import load_run

    r = load_run(run) if isinstance(run, Path) else run
    comp = judge_run(
        r,
        Path(base_name) if base_name is not None and base_obj is not None else None,
        baseline=base_obj,
        run_failed=run_failed,
        evidence=evidence,
    )
    if comp.fix_headline:
        console.print(Text(comp.fix_headline, style="bold red"), soft_wrap=True)
    code = emit(comp, as_json=False, markdown=False, junit=None)  # the table `compare` shows, serving's load too
    publish_github(comp, False)
    return code


def _prompts_per_cell(cfg: ExperimentConfig, prompts: int) -> int:
    """What a cell-repeat's progress bar counts: requests (serving), prompts × rounds (soak) or prompts."""
    if cfg.workload.kind == "serving":
        levels = cfg.workload.concurrency
        # a concurrency sweep sends num_requests at each level
        return cfg.workload.num_requests * (len(levels) if isinstance(levels, list) else 1)
    return prompts * cfg.workload.rounds if cfg.workload.kind == "soak" else prompts
