"""`mtpbench selftest`: the proof, on any machine, that the gate has teeth (and `doctor`'s engine check).

Runs the embedded tiny Gemma4 + MTP pair eagerly, stock and with the injected `flatten-draft-metadata`
fault, over two hash seeds chosen so that each KV-cache group wins the set-iteration race once, then
compares with the shipped baseline. It passes only if stock passes the gate, the fault is flagged as a
regression *and* as cross-process instability (under greedy decoding an exact finding: how many prompts
differ between the two processes, not a p-value), and the generated text is identical (the target verifies
every token, so flattening the drafter's metadata must not change a single output token).

The same run is then replayed from the weights (`run_reference_check`, mtpbench/reference/): with no baseline,
stock must count exactly what the weights say on every prompt and the fault must fall below the reference
(`engine-below-reference`) in both group orders, each repeat on its own.

It then proves the soak workload's `drift` finding the same way (`run_soak_selftest`): one engine per variant
for SOAK_ROUNDS rounds of a few prompts, stock and with the `drift-after-requests` fault set to start after
one round's requests. It passes only if stock gives identical counts in every round, the fault is flagged
as `drift` naming round 1, and the faulted engine's round 0 (what a fresh-process run of the same build
measures) equals stock's: a fresh-process gate passes the fault, the soak does not.

Every other shipped method (cli/selftest_methods.py `METHODS`: a config and a planted fault each) then gets the
quick proof: a handful of prompts, stock and with the method's fault, held against the reference from the
weights with no baseline. `--method` narrows the selftest to the methods it names.

It drives the runner and the judge together, so it lives with the command line (the one layer that may
import every stage); cli/tool_cmds.py renders what it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mtpbench.cli.selftest_methods import (
    DEFAULT_METHOD,
    METHODS,
    MethodCheck,
    hold_reference,
    run_quick_selftest,
    same_text,
)
from mtpbench.config import ExperimentConfig, config_prompts, load_config
from mtpbench.errors import UserError
from mtpbench.judge.compare import Comparison, judge
from mtpbench.judge.evidence import CellResult
from mtpbench.judge.findings import Instability, Kind, Severity
from mtpbench.judge.findings.probes import MetadataBinding
from mtpbench.judge.findings.reference import ReferenceBelow
from mtpbench.judge.findings.soak import Drift
from mtpbench.judge.signals.reference_comparison import ReferenceComparison
from mtpbench.patches.faults.drift_after_requests import AFTER_ENV
from mtpbench.render.words import finding_message
from mtpbench.run import runner
from mtpbench.specs import SoakWorkload
from mtpbench.store.baseline import load_baseline
from mtpbench.store.manifest import ensure_out_dir
from mtpbench.store.results import load_run

__all__ = [
    "SelftestResult",
    "engine_check",
    "evaluate",
    "evaluate_soak",
    "run_full_selftest",
    "run_selftest",
    "run_soak_selftest",
]

# The shipped config, from the source tree or from an installed wheel's copy (mtpbench/shipped.py).
DEFAULT_CONFIG = METHODS[DEFAULT_METHOD].config_path
FAULT = "flatten-draft-metadata"
# The metadata-binding probe rides along in both variants, so the selftest also shows *where* the fault is:
# which draft layer read which KV-cache group, per hash seed (mtpbench/patches/probes/metadata_binding.py).
PROBE = "metadata-binding"
# vLLM 0.32 keeps the draft layer names in a set and the fault binds every draft layer to the first name it
# iterates, so PYTHONHASHSEED decides which KV-cache group wins. With the shipped drafter (layers: full,
# sliding, sliding, full) seed 0 puts draft layer 0 first (the full-attention group wins) and seed 1 layer 1
# (the sliding group wins), as the patch records in each repeat (measured in the engine; seed 2 picks layer 3).
SELFTEST_SEEDS = (0, 1)
DRIFT_FAULT = "drift-after-requests"
SOAK_ROUNDS = 3
SOAK_PROMPTS = 5  # the fault starts after this many requests: round 1 is the first one it corrupts
SOAK_MAX_TOKENS = 64


@dataclass
class SelftestResult:
    comparison: Comparison
    passed: bool
    lines: list[str] = field(default_factory=list)
    # The other methods' runs (cli/selftest_methods.py), each judged on its own, shown after `comparison`.
    others: list[Comparison] = field(default_factory=list)


def selftest_config(path: Path = DEFAULT_CONFIG) -> ExperimentConfig:
    if not path.is_file():
        raise UserError(f"{path}: the embedded default config is missing (a broken install of mtpbench?)")
    cfg = load_config(path)
    eager = [m for m, spec in cfg.modes.items() if spec.enforce_eager]
    if not eager:
        raise UserError(f"{path}: the selftest needs an eager mode (enforce_eager: true)")
    cfg.modes = {eager[0]: cfg.modes[eager[0]]}
    cfg.variants = {"stock": [PROBE], "fault": [FAULT, PROBE]}
    cfg.repeats = len(SELFTEST_SEEDS)
    cfg.hash_seeds = list(SELFTEST_SEEDS)
    return cfg


def evaluate(comp: Comparison) -> tuple[bool, list[str]]:
    """Pure: did the gate see what it must? Returns the verdict and what it saw, line by line."""
    lines: list[str] = []
    ok = True
    stock = [c for c in comp.cells if c.variant == "stock"]
    fault = [c for c in comp.cells if c.variant == "fault"]
    if not stock or not fault:
        return False, ["selftest needs a stock and a fault cell"]
    for c in comp.cells:
        for r in c.repeats:
            rates = "/".join(
                f"{100 * a / r.counts.num_drafts:.1f}" if r.counts.num_drafts else "–"
                for a in r.counts.accepted_per_pos
            )
            lines.append(f"{c.cell} PYTHONHASHSEED={r.hash_seed}: pos {rates} % ({r.counts.num_drafts} drafts)")
    for c in stock:
        fails = [d for d in comp.diagnoses if d.cell == c.cell and d.severity == Severity.FAIL]
        good = c.complete and not fails
        ok &= good
        lines.append(
            f"[{'ok' if good else 'FAIL'}] stock {c.cell} passes the gate"
            + (f" ({fails[0].kind.value})" if fails else "")
        )
    for c in fault:
        found = {d.kind: d for d in comp.diagnoses if d.cell == c.cell and d.severity == Severity.FAIL}
        for need in (Kind.REGRESSION, Kind.INSTABILITY):
            seen = need in found
            ok &= seen
            how = ""
            n = found[need].payload if seen else None
            if isinstance(n, Instability) and n.method == "exact":
                how = f" (exact: {n.prompts_differing} of {n.prompts} prompts differ between processes)"
            lines.append(f"[{'ok' if seen else 'FAIL'}] fault {c.cell} flagged as {need.value}{how}")
    ok &= _localised(comp, stock, fault, lines)
    same, outputs = same_text(stock, fault)
    ok &= same
    lines.append(
        f"[{'ok' if same else 'FAIL'}] generated text identical with and without the fault ({outputs} outputs)"
    )
    return ok, lines


def evaluate_reference(cmp: ReferenceComparison) -> tuple[bool, list[str]]:
    """Pure: with no baseline, stock counts exactly what the weights say on every prompt, and the fault falls
    below the reference (engine-below-reference) in every group order, each repeat on its own."""
    stock = [a for a in cmp.cells if a.variant == "stock"]
    fault = [a for a in cmp.cells if a.variant == "fault"]
    if not stock or not fault:
        return False, ["the reference check needs a stock and a fault cell held against the reference"]
    lines: list[str] = []
    ok = True
    below = {f.cell: f.payload for f in cmp.findings if f.kind == Kind.ENGINE_BELOW_REFERENCE}
    for a in stock:
        good = a.cell not in below and a.observations > 0 and a.exact == a.same_text == a.observations
        ok &= good
        lines.append(
            f"[{'ok' if good else 'FAIL'}] stock {a.cell}: {a.exact} of {a.observations} prompt observations count "
            "exactly what the weights say (reference, no baseline)"
        )
    for a in fault:
        n = below.get(a.cell)
        seeds = set(n.hash_seeds) if isinstance(n, ReferenceBelow) else set()
        good = isinstance(n, ReferenceBelow) and seeds == set(SELFTEST_SEEDS)
        ok &= good
        shown = ", ".join(str(s) for s in sorted(s for s in seeds if s is not None)) or "none"
        lines.append(
            f"[{'ok' if good else 'FAIL'}] fault {a.cell} below the reference with no baseline, in each group "
            f"order on its own (PYTHONHASHSEED {shown})"
        )
    return ok, lines


def run_reference_check(run_dir: Path) -> tuple[bool, list[str]]:
    """The selftest run replayed from the weights (mtpbench/reference/) and held against its engine counts."""
    return evaluate_reference(hold_reference(run_dir))


def soak_config(path: Path = DEFAULT_CONFIG) -> ExperimentConfig:
    cfg = selftest_config(path)
    cfg.variants = {"stock": [], "drift": [DRIFT_FAULT]}
    cfg.repeats, cfg.hash_seeds = 1, [0]
    cfg.sampling.max_tokens = SOAK_MAX_TOKENS
    cfg.prompt_mode = "batched"
    cfg.workload = SoakWorkload(
        kind="soak", rounds=SOAK_ROUNDS, order=["A", "A-shuffled"], prefix_caching=True, round_timeout_s=300.0
    )
    for b in cfg.builds.values():
        b.env = {**b.env, AFTER_ENV: str(SOAK_PROMPTS)}
    cfg.name = f"{cfg.name}-soak-selftest"
    return cfg


def evaluate_soak(comp: Comparison, first_bad: int = 1) -> tuple[bool, list[str]]:
    """Pure: stock identical in every round, the fault flagged as drift at `first_bad`, and the faulted
    engine's round 0 (a fresh process's measurement) equal to stock's."""
    stock = [c for c in comp.cells if c.variant == "stock" and c.rounds is not None]
    fault = [c for c in comp.cells if c.variant == "drift" and c.rounds is not None]
    if not stock or not fault:
        return False, ["soak selftest needs a stock and a drift cell with rounds"]
    lines: list[str] = []
    ok = True
    bad = {Kind.DRIFT, Kind.STALL, Kind.SPECULATION_OFF}
    for c in stock:
        fails = [d for d in comp.diagnoses if d.cell == c.cell and d.severity == Severity.FAIL]
        rounds = int(c.rounds["round"].nunique()) if c.rounds is not None else 0
        good = c.complete and not fails and rounds == SOAK_ROUNDS
        ok &= good
        lines.append(
            f"[{'ok' if good else 'FAIL'}] stock {c.cell}: identical counts in all {rounds} rounds of one "
            "engine" + (f" ({fails[0].kind.value})" if fails else "")
        )
    for c in fault:
        found = [d for d in comp.diagnoses if d.cell == c.cell and d.kind in bad and d.severity == Severity.FAIL]
        drift = next((d.payload for d in found if isinstance(d.payload, Drift)), None)
        seen = drift is not None and drift.first_round == first_bad
        ok &= seen
        how = f" at round {drift.first_round} ({drift.prompts_moved} of {drift.prompts} prompts moved)" if drift else ""
        lines.append(f"[{'ok' if seen else 'FAIL'}] fault {c.cell} flagged as drift{how}, expected round {first_bad}")
    same = all(_by_prompt(s) == _by_prompt(f) for s in stock for f in fault)
    ok &= same
    lines.append(f"[{'ok' if same else 'FAIL'}] the faulted engine's round 0 (a fresh process) equals stock's")
    return ok, lines


def _by_prompt(c: CellResult) -> dict[str, list[int]]:
    """A cell's round-0 per-position counts by prompt (batched prompts finish in any order)."""
    return dict(zip(c.evidence.ids, c.evidence.per_pos.tolist(), strict=True))


def run_soak_selftest(
    out: Path, make_view: Callable[[int, int], runner.EventCallback] | None = None, config: Path = DEFAULT_CONFIG
) -> SelftestResult:
    cfg = soak_config(config)
    prompts = config_prompts(cfg)
    prompts.prompts = prompts.prompts[:SOAK_PROMPTS]
    cells = runner.expand(cfg)
    view = make_view(len(cells), SOAK_ROUNDS * SOAK_PROMPTS) if make_view else (lambda kind, payload: None)
    ensure_out_dir(out)
    outcome = runner.execute(cfg, prompts, out, str(config), cells, view)
    comp = judge(load_run(outcome.path))
    passed, lines = evaluate_soak(comp)
    lines.insert(0, f"soak selftest run: {outcome.path}")
    return SelftestResult(comp, passed and not outcome.failed, lines)


def _localised(comp: Comparison, stock: list[CellResult], fault: list[CellResult], lines: list[str]) -> bool:
    """The probe's part: stock bound correctly; the fault localised, in both group orders."""
    ok = True
    for c in stock:
        good = bool(comp.binding.get(c.cell, {}).get("verified"))
        ok &= good
        lines.append(
            f"[{'ok' if good else 'FAIL'}] stock {c.cell}: every draft layer read its own KV-cache group "
            "(metadata-binding probe)"
        )
    for c in fault:
        found = [d for d in comp.diagnoses if d.cell == c.cell and d.kind == Kind.METADATA_BINDING]
        payload = found[0].payload if found else None
        seeds = {s for w in payload.wrong for s in w.hash_seeds} if isinstance(payload, MetadataBinding) else set()
        read = {w.read_group for w in payload.wrong} if isinstance(payload, MetadataBinding) else set()
        repeats = {r.hash_seed for r in c.repeats}
        # Every repeat misbound, and the two group orders misbound to two different groups.
        good = bool(found) and seeds == repeats and len(read) >= min(2, len(repeats))
        ok &= good
        where = finding_message(found[0]) if found else "no metadata-binding finding"
        lines.append(f"[{'ok' if good else 'FAIL'}] fault {c.cell} localised: {where}")
    return ok


def run_selftest(
    out: Path,
    make_view: Callable[[int, int], runner.EventCallback] | None = None,
    methods: list[MethodCheck] | None = None,
) -> SelftestResult:
    """Every method's proof in METHODS' order (or only `methods`'): the embedded default's full one, the quick
    one for the others. Passes only if every method's does; the first method's comparison leads the report."""
    comparisons: list[Comparison] = []
    lines: list[str] = []
    passed = True
    for check in methods if methods is not None else list(METHODS.values()):
        if check.full:
            full = run_full_selftest(out, make_view, check.config_path)
            comparisons.append(full.comparison)
            passed &= full.passed
            lines += full.lines
        else:
            quick = run_quick_selftest(check, out, make_view)
            comparisons.append(quick.comparison)
            passed &= quick.passed
            lines += quick.lines
    if not comparisons:
        raise UserError("the selftest has no method to prove")
    return SelftestResult(comparisons[0], passed, lines, comparisons[1:])


def run_full_selftest(
    out: Path, make_view: Callable[[int, int], runner.EventCallback] | None = None, config: Path = DEFAULT_CONFIG
) -> SelftestResult:
    """The embedded default's full proof (the module docstring): the flattening fault, the reference, the soak."""
    cfg = selftest_config(config)
    if not cfg.baseline:
        raise UserError(f"{config}: the selftest needs the config's baseline")
    baseline = load_baseline(cfg.baseline)
    prompts = config_prompts(cfg)
    cells = runner.expand(cfg)
    view = make_view(len(cells), len(prompts.prompts)) if make_view else (lambda kind, payload: None)
    ensure_out_dir(out)
    cfg.name = f"{cfg.name}-selftest"
    outcome = runner.execute(cfg, prompts, out, str(config), cells, view)
    comp = judge(load_run(outcome.path), baseline, baseline_name=str(cfg.baseline))
    passed, lines = evaluate(comp)
    lines.insert(0, f"selftest run: {outcome.path}")
    held, reference_lines = run_reference_check(outcome.path)
    soak = run_soak_selftest(out, make_view, config)
    return SelftestResult(
        comp, passed and held and not outcome.failed and soak.passed, lines + reference_lines + soak.lines
    )


def engine_check(python: str | None, out: Path, config: Path = DEFAULT_CONFIG) -> tuple[bool, str]:
    """Start one engine on the embedded pair with one short prompt; (ok, what happened)."""
    cfg = selftest_config(config)
    cfg.variants = {"stock": []}
    cfg.repeats, cfg.hash_seeds = 1, [0]
    cfg.sampling.max_tokens = 16
    cfg.name = "doctor"
    if python:
        cfg.builds = {"doctor": cfg.builds[next(iter(cfg.builds))].model_copy(update={"python": python})}
    prompts = config_prompts(cfg)
    prompts.prompts = prompts.prompts[:1]
    outcome = runner.execute(cfg, prompts, out, str(config), runner.expand(cfg))
    entry = outcome.manifest["cells"][0]
    if outcome.failed:
        return False, f"{entry.get('error', '').splitlines()[0]} (log: {outcome.path / entry.get('log', '')})"
    return True, f"engine started in {entry.get('engine_start_s', 0):.1f} s, {outcome.path}"
