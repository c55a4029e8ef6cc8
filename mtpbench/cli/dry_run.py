"""What `mtpbench run --dry-run` prints: the preflight of each build's patch targets, every cell-repeat's
command line, environment and engine overrides (and, for serving, the server it would start), how many
prompts certify the gate's δ against the baseline, and the wall time estimated from earlier runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text

from mtpbench.cli.common import console

if TYPE_CHECKING:  # config brings pydantic, run/ and fixes/ bring more: `mtpbench --help` must not pay
    from mtpbench.config import ExperimentConfig, PromptSet
    from mtpbench.fixes.status import Preflight
    from mtpbench.judge.sizing import Sizing
    from mtpbench.run.cells import Cell, CellJob
    from mtpbench.run.cost import Estimate
    from mtpbench.run.envs.builds import BuildState

__all__ = [
    "blocking_models",
    "model_statuses",
    "path_status",
    "render_blocked",
    "render_build_states",
    "render_config_sizing",
    "render_dry_run",
    "render_estimate",
    "render_role",
]


def render_build_states(cfg: ExperimentConfig, states: list[BuildState]) -> None:
    """Where each build from pins stands: its cache entry ready (and its vllm), or installed when the run
    starts."""
    for st in states:
        pins = " ".join(cfg.builds[st.name].requirements or [])
        where = f"ready, vllm {st.vllm or '?'}" if st.ready else "not cached: installed when the run starts"
        console.print(f"build {st.name}: {pins} -> {st.path} ({where})", markup=False, highlight=False)


def render_estimate(est: Estimate | None, name: str, out: Path, jobs: int, executor: str) -> None:
    if est is None:
        console.print(f"estimate: no earlier runs of {name} in {out} to estimate the wall time from", highlight=False)
        return
    console.print(
        f"estimate: about {est.wall_s:.0f} s wall with --executor {executor} --jobs {jobs} "
        f"(from {est.runs} earlier run(s) of {name} in {out}: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in est.per_cell_s.items())
        + " per cell-repeat; parallel jobs that share CPU cores run slower than this assumes)",
        highlight=False,
        soft_wrap=True,
    )


def _render_preflight(checks: list[Preflight]) -> None:
    for pf in checks:
        console.print(Text(pf.line, style="bold red" if pf.applies is False else "dim"), soft_wrap=True)


def render_config_sizing(cfg: ExperimentConfig, cells: list[Cell], base: Path | None, prompts: int) -> None:
    """How many prompts certify δ for this config: from its baseline (its per-prompt counts, or the prior of
    its pair class), or, without a baseline, from the prior as the run will be gated once one is saved. Each
    check is sized by the units it pairs: the config's `prompts` for the baseline checks and divergence, a
    bucket's prompts for a context sweep's context decay (its prompts are the set × the buckets)."""
    from mtpbench.judge.sizing import ContextSweep, family_of_config, primary_count, size_baseline, size_prior
    from mtpbench.render.sizingreport import sizing_table
    from mtpbench.store.baseline import load_baseline

    # A k sweep is sized at its largest k: every cell counted with that many positions, a bound from above.
    k = max(cfg.speculative.ks)
    ref = cfg.reference_mode or next(
        (m for m, s in cfg.modes.items() if s.enforce_eager or s.cudagraph_mode == "NONE"), None
    )
    swept = cfg.workload.concurrency if cfg.workload.kind == "serving" else None
    levels = len(swept) if isinstance(swept, list) else 1
    ctx = getattr(cfg.workload, "context", None)  # offline workloads only
    family, divergence = family_of_config(
        k, [(c.build, c.mode, c.label) for c in cells], ref, cfg.reference_build, levels
    )
    n_cells = len({(c.build, c.mode, c.label) for c in cells})
    buckets = len(ctx.fractions) if ctx is not None else 0
    context = ContextSweep(buckets, prompts // buckets, n_cells) if ctx is not None else None
    context_checks = 0 if context is None else context.checks(k)
    primary = primary_count(cfg.gate, n_cells, k)
    if base is None and context is not None:
        console.print(
            "sizing: no baseline: the run is judged within itself (context decay, each longer bucket against the "
            "first, prompt by prompt)",
            highlight=False,
            soft_wrap=True,
        )
        why = "no baseline"
        sizes = [
            size_prior(
                "(no baseline)", cfg.speculative.method, None, why, cfg.gate, context_checks, 0, 0, prompts, context
            )
        ]
        sizes = [_context_only(s) for s in sizes]
    elif base is None:
        console.print(
            "sizing: no baseline yet (record one with `mtpbench baseline save` on a known-good build); sized as "
            "the run will be gated once it has one",
            highlight=False,
            soft_wrap=True,
        )
        why = "no baseline yet"
        sizes = [
            size_prior(
                "(no baseline)", cfg.speculative.method, None, why, cfg.gate, family, primary, divergence, prompts
            )
        ]
    else:
        serving = cfg.workload.kind == "serving"
        sizes = size_baseline(
            load_baseline(base), cfg.gate, family + context_checks, primary, divergence, serving, prompts, context
        )
    console.print(sizing_table(sizes, cfg.gate, "the config's"))


def _context_only(size: Sizing) -> Sizing:
    """A run judged without a baseline makes no baseline checks: only its context-decay rows are its own."""
    import dataclasses

    return dataclasses.replace(size, positions=[p for p in size.positions if p.context])


# A path a shipped config leaves for the user to fill in (configs/gemma4-mtp-cuda.yaml: /path/to/...).
_PLACEHOLDERS = ("/path/to/", "<", "PLACEHOLDER", "TODO")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def path_status(value: str | None) -> str:
    """local | placeholder | missing | hub id | none: what a model or drafter value names, without loading it.
    A value that is no local path but has the shape org/name is a hub id vLLM fetches at run time."""
    if not value:
        return "none"
    if any(mark in value for mark in _PLACEHOLDERS):
        return "placeholder"
    try:
        if Path(value).expanduser().exists():
            return "local"
    except OSError:
        return "missing"
    if _HUB_ID.match(value) and not value.startswith((".", "~")):
        return "hub id"
    return "missing"


def model_statuses(cfg: ExperimentConfig) -> list[tuple[str, str | None, str]]:
    return [
        (what, v, path_status(v))
        for what, v in (("model", cfg.model), ("drafter", cfg.speculative.model))
        if what == "model" or v is not None
    ]


def blocking_models(cfg: ExperimentConfig, executor: str) -> list[tuple[str, str | None, str]]:
    """The model or drafter values no cell could start with: a placeholder anywhere; with the local executor,
    a value that names nothing on this machine and has no hub id's shape. A hub id passes (vLLM fetches it
    when the run starts; a machine without the hub fails then, which a dry run cannot know), and so does a
    missing path under Ray (it may exist on the cluster's nodes only)."""
    return [
        (what, v, st)
        for what, v, st in model_statuses(cfg)
        if st == "placeholder" or (st == "missing" and executor == "local")
    ]


def render_blocked(blocked: list[tuple[str, str | None, str]]) -> None:
    """The dry run's last line when it exits 2: a CI preflight of a config that cannot start must fail."""
    names = ", ".join(f"{what} {v!r} ({st})" for what, v, st in blocked)
    console.print(
        f"[bold red]dry run: this config cannot start[/]: {names}; set them to a local path or a hub id (exit 2)",
        markup=True,
        highlight=False,
        soft_wrap=True,
    )


def render_role(cfg: ExperimentConfig, prompts: int) -> None:
    """A reproduction config says what its verdict means before anything is run (specs.ConfigRole)."""
    from mtpbench.render.words.verdict import reproduction_note

    if cfg.role == "reproduction":
        console.print(Text(reproduction_note(prompts), style="bold yellow"), soft_wrap=True)


def _render_missing(cfg: ExperimentConfig) -> None:
    bad = [(what, v, st) for what, v, st in model_statuses(cfg) if st in ("placeholder", "missing")]
    for what, v, st in bad:
        why = "a placeholder" if st == "placeholder" else "not a local path or a hub id"
        console.print(
            f"[bold red]MISSING {what}[/]: {v!r} is {why}: fill it in before running (every cell needs it)",
            markup=True,
            highlight=False,
            soft_wrap=True,
        )


def render_dry_run(cfg: ExperimentConfig, prompts: PromptSet, plans: list[CellJob]) -> None:
    from mtpbench.fixes.status import preflight

    # Said first and again last, so neither the head nor the tail of a long listing hides an unapplied fix
    # (nor a model or drafter that is missing).
    checks = preflight(plans)
    _render_preflight(checks)
    _render_missing(cfg)
    console.print(
        f"[bold]{cfg.name}[/]: {len(plans)} cell-repeats = {len(cfg.builds)} builds × {len(cfg.modes)} modes × "
        f"{len(cfg.variants)} variants × "
        f"{f'{len(cfg.speculative.ks)} k × ' if cfg.speculative.sweep else ''}{cfg.repeats} repeats; "
        f"{len(prompts.prompts)} prompts "
        f"(sha256 {prompts.sha256()[:12]}), k={cfg.speculative.num_speculative_tokens}, "
        f"temperature {cfg.sampling.temperature}, max_tokens {cfg.sampling.max_tokens}",
        highlight=False,
    )
    for p in plans:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in p.env.items())
        mode_args = cfg.modes[p.cell.mode].engine_args  # the mode's features (prefix caching, batch size, ...)
        eng = {
            k: v for k, v in p.job["engine_args"].items() if k in ("enforce_eager", "compilation_config", *mode_args)
        }
        console.print(f"\n[bold]{p.cell.cell_id}[/] repeat {p.cell.repeat}", highlight=False)
        console.print(f"  $ {env} {shlex.join(p.command())}", markup=False, highlight=False, soft_wrap=True)
        console.print(
            f"  patches: {', '.join(p.job['patches']) or 'none'}; engine overrides: {eng or 'none'}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        if p.job["workload"]["kind"] == "soak":
            wl = p.job["workload"]
            console.print(
                f"  soak: one engine for {wl['rounds']} rounds, sets {' → '.join(wl['order'])} cycled, "
                f"prefix caching {wl['prefix_caching'] if wl['prefix_caching'] is not None else 'default'}"
                f", a round past {wl['round_timeout_s']:g} s is a stall",
                markup=False,
                highlight=False,
            )
        console.print(
            "  " + "; ".join(f"{what}: {v} ({st})" for what, v, st in model_statuses(cfg)),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        if p.job["workload"]["kind"] == "serving":
            from mtpbench.engine.serving import server_command

            wl = p.job["workload"]
            policy = wl.get("per_request_metrics", "auto")
            cmd = server_command(
                p.python,
                p.job["model"],
                0,
                p.job["speculative_config"],
                p.job["engine_args"],
                wl["server_args"],
                policy != "off",
            )
            cmd[cmd.index("--port") + 1] = "<free port>"
            again = " (auto: once more without the flag if the build refuses it)" if policy == "auto" else ""
            console.print(
                f"  serving: {wl['num_requests']} requests at concurrency {wl['concurrency']}, rate "
                f"{wl['request_rate'] or 'unlimited'}; the worker starts: {shlex.join(cmd)}{again}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    _render_missing(cfg)
    if checks:
        console.print("\npreflight (each build's interpreter imported what the variants' patches target):")
        _render_preflight(checks)
    console.print(
        "\ndry run: nothing was started" + (" but the preflight probes above (no engine, no worker)" if checks else "")
    )
