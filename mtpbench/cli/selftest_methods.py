"""The methods `mtpbench selftest` proves the gate on: one row per shipped speculative method (its config and
its planted fault), and the quick proof every method but the embedded default gets.

The embedded default (Gemma4 MTP, `mtp`) keeps its full proof (cli/selftest.py: the flattening fault in both
KV-cache group orders against the baseline, the metadata-binding probe, the reference, the soak). Every other
method gets the quick form here: its shipped config, eager, one repeat, QUICK_PROMPTS prompts, stock and with
the method's planted fault. It passes only if stock counts exactly what the weights say on every prompt (the
reference, mtpbench/reference/, no baseline needed), the fault falls below the reference
(`engine-below-reference`), and the generated text is the same with and without the fault (the target verifies
every token). A method becomes one more row of METHODS: a config and a fault. Proposers built on vLLM's
`SpecDecodeBaseProposer` (draft model, EAGLE, EAGLE-3, the MTP families) take `drift-after-requests` with
MTPBENCH_DRIFT_AFTER=0 (their drafts perturbed from the first request on); the n-gram and suffix proposers are
not built on it and take their own `perturb-ngram-drafts` and `perturb-suffix-drafts`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mtpbench import shipped
from mtpbench.config import ExperimentConfig, config_prompts, load_config
from mtpbench.errors import UserError
from mtpbench.judge.compare import Comparison, judge
from mtpbench.judge.evidence import CellResult, collect_evidence
from mtpbench.judge.findings import Kind
from mtpbench.judge.signals.reference_comparison import ReferenceComparison
from mtpbench.patches.faults.drift_after_requests import AFTER_ENV
from mtpbench.run import runner
from mtpbench.specs import PromptFilter
from mtpbench.store.manifest import ensure_out_dir
from mtpbench.store.results import load_run

__all__ = [
    "DEFAULT_METHOD",
    "METHODS",
    "QUICK_PROMPTS",
    "MethodCheck",
    "QuickResult",
    "check_runnable",
    "evaluate_quick",
    "hold_reference",
    "quick_config",
    "run_quick_selftest",
    "select_methods",
]

# A handful of prompts: the quick form proves the fault is caught, prompt by prompt against the weights, not
# a rate against a baseline, so a few prompts with drafts at every position are enough evidence.
QUICK_PROMPTS = 5


@dataclass(frozen=True)
class MethodCheck:
    """One shipped method as the selftest proves it: `config` is a file under the shipped configs/ folder,
    `fault` the patch (mtpbench/fixes/registry.py) planted in its fault variant, `fault_env` what that patch
    reads from the environment, `full` whether it gets the embedded default's full proof, and `method` vLLM's
    method name in the config where the row's name says more (an MTP family: vLLM calls every one `mtp`)."""

    name: str
    config: str
    fault: str
    fault_env: Mapping[str, str] = field(default_factory=dict)
    full: bool = False
    method: str = ""

    @property
    def vllm_method(self) -> str:
        return self.method or self.name

    @property
    def config_path(self) -> Path:
        return shipped.data_root() / "configs" / self.config


# vLLM's method name -> its check. The order is the order they run in.
METHODS: dict[str, MethodCheck] = {
    "mtp": MethodCheck("mtp", "tiny-gemma4-mtp.yaml", "flatten-draft-metadata", full=True),
    "ngram": MethodCheck("ngram", "tiny-gemma4-ngram.yaml", "perturb-ngram-drafts"),
    "suffix": MethodCheck("suffix", "tiny-gemma4-suffix.yaml", "perturb-suffix-drafts"),
    # Drafts perturbed from the first request on: the fault run's engine serves its handful of prompts only.
    "draft_model": MethodCheck("draft_model", "tiny-llama-draft-model.yaml", "drift-after-requests", {AFTER_ENV: "0"}),
    "eagle": MethodCheck("eagle", "tiny-llama-eagle.yaml", "drift-after-requests", {AFTER_ENV: "0"}),
    "eagle3": MethodCheck("eagle3", "tiny-llama-eagle3.yaml", "drift-after-requests", {AFTER_ENV: "0"}),
    # DeepSeek MTP: vLLM's `mtp` over a DeepSeek target's own next-token layer (the same proposer base). Its
    # config's stock variant carries the cpu-rotary-embedding correction, which both quick variants keep.
    "deepseek_mtp": MethodCheck(
        "deepseek_mtp", "tiny-deepseek-mtp.yaml", "drift-after-requests", {AFTER_ENV: "0"}, method="mtp"
    ),
}
DEFAULT_METHOD = "mtp"


def select_methods(names: list[str] | None) -> list[MethodCheck]:
    """The checks `--method` names (every method when none), in METHODS' order; an unknown name is bad input."""
    if not names:
        return list(METHODS.values())
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise UserError(f"--method {unknown[0]}: no such method in the selftest; known: {', '.join(METHODS)}")
    return [check for name, check in METHODS.items() if name in names]


def check_runnable(checks: list[MethodCheck]) -> None:
    """Refuse, in one line before any engine starts, a selftest of a method this install cannot run (suffix
    without arctic-inference: an install without mtpbench's suffix extra), naming `--method` as the way around."""
    from mtpbench.run.envs.builds import missing_method_library

    for check in checks:
        if check.full:
            continue
        why = missing_method_library(quick_config(check))
        if why is not None:
            others = [c.name for c in checks if c is not check]
            narrow = f"; or prove the others alone (--method {' --method '.join(others)})" if others else ""
            raise UserError(f"selftest {check.name}: {why}{narrow}")


def quick_config(check: MethodCheck) -> ExperimentConfig:
    """The method's shipped config cut to the quick form: its eager mode, one repeat, stock and the fault."""
    path = check.config_path
    if not path.is_file():
        raise UserError(f"{path}: the {check.name} method's config is missing (a broken install of mtpbench?)")
    cfg = load_config(path)
    eager = [m for m, spec in cfg.modes.items() if spec.enforce_eager]
    if not eager:
        raise UserError(f"{path}: the selftest needs an eager mode (enforce_eager: true)")
    cfg.modes = {eager[0]: cfg.modes[eager[0]]}
    # Stock is the config's own stock variant: the CPU corrections its engine needs to compute what the weights
    # say (e.g. cpu-rotary-embedding for MLA); the fault is planted on top of them.
    stock = list(cfg.variants.get("stock", []))
    cfg.variants = {"stock": stock, "fault": [*stock, check.fault]}
    cfg.repeats, cfg.hash_seeds = 1, [0]
    # The handful of prompts is a filter of the config (not a slice of the loaded set), so the run's manifest
    # names the prompts it ran and the reference replays the same ones (reference/compute.py checks the sha).
    limit = QUICK_PROMPTS if cfg.prompt_filter is None or cfg.prompt_filter.limit is None else cfg.prompt_filter.limit
    kept = min(limit, QUICK_PROMPTS)
    cfg.prompt_filter = (
        PromptFilter(limit=kept) if cfg.prompt_filter is None else cfg.prompt_filter.model_copy(update={"limit": kept})
    )
    # The fault's switches ride on the build's environment; a variant without the fault ignores them.
    for build in cfg.builds.values():
        build.env = {**build.env, **check.fault_env}
    cfg.name = f"{cfg.name}-selftest"
    return cfg


def hold_reference(run_dir: Path) -> ReferenceComparison:
    """A run replayed from the weights (mtpbench/reference/) and held against its engine counts, no baseline."""
    from mtpbench.judge.signals.reference_comparison import hold
    from mtpbench.reference import ReferenceOptions, compute_reference

    run = load_run(run_dir)
    ref = compute_reference(run, ReferenceOptions())
    gate = run.typed.config.gate
    return hold(
        run.run_id,
        collect_evidence(run, gate.confidence).cells,
        ref,
        run.typed.k,
        false_alarm=gate.false_alarm,
        tolerance_pts=gate.tolerance_pts,
        tolerance_al_pct=gate.tolerance_al_pct,
        confidence=gate.confidence,
    )


def same_text(stock: list[CellResult], fault: list[CellResult]) -> tuple[bool, int]:
    """Whether every (hash seed, prompt) output of the fault cells equals stock's, and how many were compared."""
    stock_out = {(r.hash_seed, p): s for c in stock for r in c.repeats for p, s in r.outputs.items()}
    fault_out = {(r.hash_seed, p): s for c in fault for r in c.repeats for p, s in r.outputs.items()}
    same = bool(stock_out) and set(stock_out) == set(fault_out) and all(fault_out[k] == v for k, v in stock_out.items())
    return same, len(stock_out)


def evaluate_quick(method: str, comp: Comparison, cmp: ReferenceComparison) -> tuple[bool, list[str]]:
    """Pure: stock drafted and counts exactly what the weights say on every prompt, the fault falls below the
    reference with no baseline, and the text is the same with and without the fault."""
    stock = [c for c in comp.cells if c.variant == "stock"]
    fault = [c for c in comp.cells if c.variant == "fault"]
    held_stock = [a for a in cmp.cells if a.variant == "stock"]
    held_fault = [a for a in cmp.cells if a.variant == "fault"]
    if not stock or not fault or not held_stock or not held_fault:
        return False, [f"[FAIL] {method}: the quick selftest needs a stock and a fault cell held against the reference"]
    lines: list[str] = []
    ok = True
    for c in comp.cells:
        for r in c.repeats:
            rates = "/".join(
                f"{100 * a / r.counts.num_drafts:.1f}" if r.counts.num_drafts else "–"
                for a in r.counts.accepted_per_pos
            )
            lines.append(f"{method} {c.cell}: pos {rates} % ({r.counts.num_drafts} drafts)")
    below = {f.cell for f in cmp.findings if f.kind == Kind.ENGINE_BELOW_REFERENCE}
    for a in held_stock:
        good = a.cell not in below and a.engine_drafts > 0 and a.observations > 0
        good = good and a.exact == a.same_text == a.observations
        ok &= good
        lines.append(
            f"[{'ok' if good else 'FAIL'}] {method}: stock {a.cell}: {a.exact} of {a.observations} prompts count "
            f"exactly what the weights say ({a.engine_drafts} drafts; reference, no baseline)"
        )
    for a in held_fault:
        # Greedy on the CPU is bit-exact: every prompt accepting fewer drafts than the weights say is evidence
        # on its own, where the pooled finding may not be raised (measured: n-gram's fault, 5 of 5 prompts fewer).
        good = a.cell in below or (a.prompts > 0 and len(a.fewer) == a.prompts)
        ok &= good
        lines.append(
            f"[{'ok' if good else 'FAIL'}] {method}: fault {a.cell} below the reference with no baseline "
            f"({len(a.fewer)} of {a.prompts} prompts accept fewer drafts than the weights say)"
        )
    same, outputs = same_text(stock, fault)
    ok &= same
    lines.append(
        f"[{'ok' if same else 'FAIL'}] {method}: generated text identical with and without the fault "
        f"({outputs} outputs)"
    )
    return ok, lines


@dataclass
class QuickResult:
    comparison: Comparison
    passed: bool
    lines: list[str]


def run_quick_selftest(
    check: MethodCheck, out: Path, make_view: Callable[[int, int], runner.EventCallback] | None = None
) -> QuickResult:
    """The quick proof for one method: run stock and the fault, replay the run from the weights, evaluate."""
    cfg = quick_config(check)
    prompts = config_prompts(cfg)
    cells = runner.expand(cfg)
    view = make_view(len(cells), len(prompts.prompts)) if make_view else (lambda kind, payload: None)
    ensure_out_dir(out)
    outcome = runner.execute(cfg, prompts, out, str(check.config_path), cells, view)
    comp = judge(load_run(outcome.path))
    if outcome.failed:
        return QuickResult(comp, False, [f"[FAIL] {check.name}: the selftest run failed: {outcome.path}"])
    passed, lines = evaluate_quick(check.name, comp, hold_reference(outcome.path))
    lines.insert(0, f"{check.name} selftest run: {outcome.path} (fault {check.fault}, {len(prompts.prompts)} prompts)")
    return QuickResult(comp, passed, lines)
