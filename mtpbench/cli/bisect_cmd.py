"""`mtpbench bisect CONFIG --good BUILD --bad BUILD`: the first bad build of the config's ordered builds.

The search is run/bisect.py's. Here each build is measured (its cells run by the runner into a run folder
of its own under --out, its environment provisioned first when it is a build from pins) or, when a
folder under --out already holds its complete cells for this same config, reused. Each build is then
judged against the good build with the gate's own rule: the good build's run becomes an in-memory baseline
(`baseline save`'s code), and the build's run is compared with it, each mode against the good build's same
mode. A regression or bug signature (exit 1) is bad, a pass is good, and anything else cannot decide: a
failed install or engine, not comparable, inconclusive. The good build itself is checked against the
config's baseline when the config names one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from mtpbench.cli.common import console, say
from mtpbench.cli.progress import install_view
from mtpbench.errors import ExitCode, UserError

_H_GOOD = "A build known good (default: the config's first)."
_H_BAD = "A build known bad (default: the config's last)."
_H_OUT = "Folder for the builds' runs; complete runs of this config already there are reused."


def bisect(
    config: Annotated[str, typer.Argument(metavar="CONFIG", help="Config file, or a shipped config's name.")],
    good: Annotated[str | None, typer.Option(help=_H_GOOD)] = None,
    bad: Annotated[str | None, typer.Option(help=_H_BAD)] = None,
    out: Annotated[Path, typer.Option(help=_H_OUT)] = Path("runs"),
    mode: Annotated[list[str] | None, typer.Option("--mode", help="Only these modes (repeatable).")] = None,
    variant: Annotated[str | None, typer.Option(help="The variant measured (default: the config's first).")] = None,
    repeats: Annotated[int | None, typer.Option(help="Override the config's repeats.", min=1)] = None,
) -> int:
    """Find the first bad build between --good and --bad, in the config's order, by binary search."""
    from mtpbench.config import config_prompts, load_config
    from mtpbench.run.bisect import max_builds, search

    cfg = load_config(config)
    _narrow(cfg, mode, variant, repeats)
    order = list(cfg.builds)
    good = good or order[0]
    bad = bad or order[-1]
    prompts = config_prompts(cfg)
    session = _Session(cfg, prompts, out, str(config), good)
    result = search(order, good, bad, session.judge, session.check_good)
    for t in result.tested:
        how = "measured" if t.measured else "reused"
        console.print(f"  {t.build}: {t.outcome.value} ({how}){': ' + t.why if t.why else ''}", highlight=False)
    span = order[order.index(good) : order.index(bad) + 1]
    if result.skipped:
        console.print(
            f"first bad build: one of {', '.join([*result.skipped, result.first_bad or '?'])} (after "
            f"{result.last_good}; {', '.join(result.skipped)} could not be tested)",
            highlight=False,
        )
    else:
        console.print(f"first bad build: {result.first_bad}", highlight=False)
    console.print(
        f"evidence: {result.evidence()}\nlast good build: {result.last_good}; builds run: {result.builds_run} of "
        f"{len(span)} (at most {max_builds(len(span))}); runs under {out}",
        highlight=False,
    )
    return 0


def _narrow(cfg: Any, modes: list[str] | None, variant: str | None, repeats: int | None) -> None:
    for name in modes or []:
        if name not in cfg.modes:
            raise UserError(f"--mode {name!r}: not in the config's modes ({', '.join(cfg.modes)})")
    if modes:
        cfg.modes = {k: v for k, v in cfg.modes.items() if k in modes}
    chosen = variant or next(iter(cfg.variants))
    if chosen not in cfg.variants:
        raise UserError(f"--variant {chosen!r}: not in the config's variants ({', '.join(cfg.variants)})")
    cfg.variants = {chosen: cfg.variants[chosen]}
    if repeats is not None:
        seeds = cfg.seeds()
        cfg.hash_seeds = seeds[:repeats] if repeats <= len(seeds) else [*seeds, *range(len(seeds), repeats)]
        cfg.repeats = repeats


def _comparable_dump(cfg: Any) -> dict[str, Any]:
    """What must match for a stored run to stand for a build: the whole config but the other builds and
    the provisioned environment's path (the pins and their key decide it)."""
    data = json.loads(
        cfg.model_dump_json(exclude={"builds", "reference_build", "baseline", "baseline_entry", "description"})
    )
    return data


def _build_identity(spec: Any) -> dict[str, Any]:
    data = spec.model_dump(mode="json", exclude={"provisioned"})
    data["key"] = spec.provisioned.key if spec.provisioned is not None else None
    return data


class _Session:
    """The builds measured or found so far (build → run folder), and the judging against the good one."""

    def __init__(self, cfg: Any, prompts: Any, out: Path, config_path: str, good: str) -> None:
        self.cfg, self.prompts, self.out, self.config_path, self.good = cfg, prompts, out, config_path, good
        self.runs: dict[str, Path] = {}
        self.fresh: set[str] = set()

    def measure(self, build: str) -> tuple[Path | None, str]:
        """The build's run folder (reused or made now), or None with why it cannot be tested."""
        from mtpbench.errors import PinError, ProvisionError
        from mtpbench.run import runner
        from mtpbench.run.envs.builds import resolve_builds
        from mtpbench.store.manifest import ensure_out_dir

        if build in self.runs:
            return self.runs[build], ""
        # One build per run: a reference build is the good build's role here, not the run's config's.
        one = self.cfg.model_copy(update={"builds": {build: self.cfg.builds[build]}, "reference_build": None})
        try:
            with install_view() as view:
                one, _ = resolve_builds(one, on_step=view.step, on_output=view.output)
        except ProvisionError as exc:
            return None, f"install failed: {exc}"
        except PinError as exc:  # a pin no index can satisfy: this build cannot be tested, others may
            return None, f"cannot install: {exc}"
        found = self._stored(one, build)
        if found is not None:
            self.runs[build] = found
            return found, ""
        ensure_out_dir(self.out)
        say(f"bisect: measuring {build}")
        outcome = runner.execute(one, self.prompts, self.out, self.config_path, runner.expand(one))
        self.fresh.add(build)
        if outcome.failed:
            return None, f"run failed ({', '.join(outcome.failed[:3])}; {outcome.path})"
        self.runs[build] = outcome.path
        return outcome.path, ""

    def _stored(self, one: Any, build: str) -> Path | None:
        """A complete run under --out of this same config with this build's cells (the newest)."""
        if not self.out.is_dir():
            return None
        want = _comparable_dump(one)
        ident = _build_identity(one.builds[build])
        sha = self.prompts.sha256()
        for d in sorted(self.out.iterdir(), reverse=True):
            try:
                m = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(m, dict) or m.get("status") != "complete":
                continue
            c = m.get("config") or {}
            builds = c.get("builds") or {}
            if (m.get("prompts") or {}).get("sha256") != sha or list(builds) != [build]:
                continue
            try:
                from mtpbench.config import ExperimentConfig

                stored = ExperimentConfig.model_validate(c)
            except ValueError:
                continue
            if _comparable_dump(stored) == want and _build_identity(stored.builds[build]) == ident:
                return d
        return None

    def check_good(self) -> Any:
        from mtpbench.run.bisect import Judged, Outcome

        path, why = self.measure(self.good)
        if path is None:
            return Judged(self.good, Outcome.UNTESTABLE, why)
        code, words = self._verdict(path, None)
        outcome = Outcome.GOOD if code == ExitCode.OK else Outcome.BAD
        return Judged(self.good, outcome, words, self.good in self.fresh)

    def judge(self, build: str) -> Any:
        from mtpbench.run.bisect import Judged, Outcome

        path, why = self.measure(build)
        if path is None:
            return Judged(build, Outcome.UNTESTABLE, why, build in self.fresh)
        code, words = self._verdict(path, self.runs[self.good])
        if code == ExitCode.REGRESSION:
            outcome = Outcome.BAD
        elif code == ExitCode.OK:
            outcome = Outcome.GOOD
        else:
            outcome = Outcome.UNTESTABLE
        return Judged(build, outcome, words, build in self.fresh)

    def _verdict(self, path: Path, good_run: Path | None) -> tuple[ExitCode, str]:
        """The gate's exit code for the run at `path`: against the good build's run (each mode against the
        good build's same mode), or for the good build itself against the config's baseline (none: the
        checks that need no baseline)."""
        from mtpbench.judge import compare as cmp
        from mtpbench.judge.save import baseline_of_run
        from mtpbench.store.baseline import load_baseline
        from mtpbench.store.results import load_run

        run = load_run(path)
        if good_run is not None:
            variant = next(iter(self.cfg.variants))
            base = baseline_of_run(load_run(good_run), f"build {self.good}", variant)
            build = next(iter(run.typed.config.builds))
            emap = {f"{build}/{m}": f"{self.good}/{m}" for m in self.cfg.modes}
            comp = cmp.judge(run, base, baseline_name=f"build {self.good}", entry_map=emap, accept_unchecked=True)
        elif self.cfg.baseline:
            comp = cmp.judge(run, load_baseline(self.cfg.baseline), baseline_path=self.cfg.baseline)
        else:
            comp = cmp.judge(run)
        return comp.exit_code, _evidence(comp)


def _evidence(comp: Any) -> str:
    """The failing checks in words: per failing cell its AL and every position (baseline → run, Δ, prompts),
    as docs/builds.md promises; else the first failing findings."""
    from mtpbench.judge.findings import Severity, Verdict

    failing = [c.cell for c in [*comp.lengths, *comp.checks] if c.verdict == Verdict.REGRESSION and c.delta is not None]
    words = []
    for cell in dict.fromkeys(failing):
        parts = [
            f"AL {c.base_al:.2f} → {c.run_al:.2f} ({c.delta:+.2f} tok, {c.prompts} prompts)"
            for c in comp.lengths
            if c.cell == cell and c.delta is not None and c.base_al is not None and c.run_al is not None
        ]
        for c in sorted((c for c in comp.checks if c.cell == cell and c.delta is not None), key=lambda c: c.pos):
            # The checks hold fractions; people read points.
            base, run, delta = 100 * (c.base_rate or 0.0), 100 * (c.run_rate or 0.0), 100 * c.delta
            mark = ", regression" if c.verdict == Verdict.REGRESSION else ""
            parts.append(f"pos{c.pos} {base:.1f} → {run:.1f} % ({delta:+.1f} pts, {c.prompts} prompts{mark})")
        words.append(f"{cell} " + ", ".join(parts))
    if words:
        return "; ".join(words)
    fails = [f for f in comp.diagnoses if f.severity == Severity.FAIL]
    if fails:
        return "; ".join(f"{f.name} {f.cell}" for f in fails[:3])
    return "no check failed" if comp.exit_code == ExitCode.OK else f"exit {int(comp.exit_code)}"
