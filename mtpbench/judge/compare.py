"""Pure verdicts: a run's cells against a baseline, against each other, and across their repeats.

One judging is one pass, each step a plain call, and `judge` is the one composition of them (`mtpbench report`
hands it a painter, which gets the cells and checks between the checks and the diagnoses):

1. `plan.admit`: the baseline is comparable or refused (exit 4), before anything is collected;
2. `evidence.collect_evidence`: the run's records turned into per-cell evidence, once;
3. `plan.make_plan`: the gate, the serving summary, the divergence pairs and the family of checks;
4. `check`: each cell against its baseline entry (checks.py, signals/upstream.py, the serving throughput), fail-closed:
   a cell with no entry is not comparable, a drop beyond the tolerance that the data cannot support is
   `inconclusive`, never a pass;
5. `diagnoses.diagnose`: what needs no baseline (cell health, patches, probes, instability, drift,
   graph divergence, text changes);
6. `combine`: the Comparison, the checks' findings after the diagnoses (the order they have always had).

Findings are structured (enums for verdict, severity, kind and cause; numbers); render/words/ words them.
The exit code comes from the findings through the one policy in errors.py. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mtpbench.errors import ExitCode, combine_exit_codes
from mtpbench.judge.checks import (
    EXTRA_FIELD,
    IDENTITY_FIELDS,
    LengthCheck,
    PositionCheck,
    aligned_with,
    check_findings,
    length_check,
    position_check,
    resolve_entry,
)
from mtpbench.judge.diagnoses import Diagnosed, diagnose
from mtpbench.judge.evidence import CellResult, Evidence, collect_evidence
from mtpbench.judge.figdata import BuildsView
from mtpbench.judge.findings import (
    Cause,
    Finding,
    Kind,
    NoBaseline,
    SameRunBaseline,
    Severity,
    Unchecked,
    Verdict,
    for_method,
)
from mtpbench.judge.findings.context import ContextTable
from mtpbench.judge.plan import Against, Levels, Plan, admit, make_plan
from mtpbench.judge.signals import serving_summary, upstream
from mtpbench.judge.signals.builds import builds_table
from mtpbench.judge.signals.context import context_table
from mtpbench.judge.signals.per_request import CellHistogram
from mtpbench.judge.signals.reference_comparison import ReferenceComparison
from mtpbench.judge.signals.serving_summary import ServingCell
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import Baseline, BaselineEntry
from mtpbench.store.results import Run

__all__ = ["Checked", "Comparison", "PainterHook", "check", "combine", "judge"]


@dataclass
class Comparison(Levels):
    run_id: str
    cells: list[CellResult]
    checks: list[PositionCheck] = field(default_factory=list)
    lengths: list[LengthCheck] = field(default_factory=list)  # acceptance length per cell against the baseline
    diagnoses: list[Finding] = field(default_factory=list)
    baseline: str | None = None
    baseline_provenance: dict[str, Any] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)
    gate: GateSpec = field(default_factory=GateSpec)
    greedy: bool = True
    # The run's statistical checks (plan.Plan.family): its false-alarm rate is split among them (plan.split_alpha).
    family: int = 1
    # The checks a pass certifies (plan.Plan.primary): the certificate's confidence is simultaneous over them.
    primary: int = 1
    # Per probed cell, the metadata-binding probe's layer × group table (judge/signals/binding_readout.py `document`).
    binding: dict[str, Any] = field(default_factory=dict)
    # The serving summary (serving runs only), made once from the same evidence (judge/signals/serving_summary.py).
    serving: list[ServingCell] | None = field(default=None, repr=False)
    # One line when a requested fix did not apply (mtpbench.fixes.status.headline), for `run`'s summary.
    fix_headline: str | None = None
    # The run's config's role (specs.ConfigRole): a reproduction's verdict says what its inconclusive means.
    role: str = "gate"
    # The baseline the run's config names, when the comparison was made without one (`show`, `--no-compare`):
    # said instead of "no baseline given".
    config_baseline: str | None = None
    # The run folder as it was opened: the compare command a verdict suggests names it, so that it runs pasted.
    run_path: str | None = None
    # A run of several builds: the builds × positions table and each cell's build-divergence (judge/signals/builds.py).
    builds: BuildsView | None = None
    # The run held against the acceptance its weights give (`mtpbench reference`, stored beside the run):
    # per cell and position, the engine's rate next to the reference's; None for a run never replayed.
    reference: ReferenceComparison | None = None
    # A context sweep's acceptance per bucket, per cell (judge/signals/context.py); empty for any other run.
    context: list[ContextTable] = field(default_factory=list)
    # Per cell, its requests in vLLM's per-request shape and their pooled acceptance histogram
    # (judge/signals/per_request.py); empty until the diagnoses are made.
    per_request: list[CellHistogram] = field(default_factory=list, repr=False)

    @property
    def findings(self) -> list[Finding]:
        return self.diagnoses

    @property
    def exit_code(self) -> ExitCode:
        return combine_exit_codes(f.exit_code for f in self.diagnoses)


@dataclass
class Checked:
    """The run's cells against the baseline: position and AL checks, and their findings in the order shown."""

    checks: list[PositionCheck] = field(default_factory=list)
    lengths: list[LengthCheck] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)  # every field the baseline could not check


def check(plan: Plan) -> Checked:
    """Each cell against its baseline entry (nothing without a baseline): they depend on the cells and the
    baseline only, so a report can draw its figures from them before the diagnoses are made."""
    out = Checked()
    against = plan.against
    if against is None:
        return out
    out.findings.extend(_unchecked(plan, against, out))
    out.findings.extend(_same_run(plan, against))
    resolved: dict[str, BaselineEntry] = {}  # cell -> the entry that judged it (acceptance and throughput alike)
    for c in plan.cells:
        entry, _rule = resolve_entry(against.baseline, c, against.entry_map, against.name)
        if entry is None:
            out.checks.extend(
                PositionCheck(c.cell, i, c.summary.per_pos[i], None, None, None, Verdict.NO_BASELINE)
                for i in range(c.evidence.k)
            )
            out.findings.append(_no_baseline(c, against))
            continue
        resolved[c.cell] = entry
        out.findings.extend(_check_cell(plan, c, entry, out))
    out.findings.extend(serving_summary.throughput_diagnoses(plan.run, resolved, plan.served))
    return out


def _unchecked(plan: Plan, against: Against, out: Checked) -> list[Finding]:
    # Workload fields a serving baseline did not record are listed, not refused: they do not decide what was
    # measured (model, drafter, prompts), only how fast.
    out.unchecked = (
        against.unchecked + against.serving_unchecked + serving_summary.throughput_unchecked(plan.run, against.baseline)
    )
    if not out.unchecked:
        return []
    identity = [u for u in out.unchecked if u in IDENTITY_FIELDS or u.startswith(("sampling.", EXTRA_FIELD))]
    by = None if not identity else "config" if against.named else "flag"
    payload = Unchecked(fields=out.unchecked, identity=identity, accepted_by=by)
    return [Finding(Kind.UNCHECKED, Severity.INFO, "*", Cause.UNVERIFIED_IDENTITY, payload)]


def _same_run(plan: Plan, against: Against) -> list[Finding]:
    # A baseline saved from this very run agrees with it by construction: every check passes and rules out
    # nothing about the build, so the pass must not read as a certificate (issue 30).
    if against.baseline.provenance.run_id != plan.run.run_id:
        return []
    payload = SameRunBaseline(run_id=plan.run.run_id, baseline=against.name)
    return [Finding(Kind.SAME_RUN_BASELINE, Severity.WARN, "*", Cause.SAME_RUN, payload)]


def _no_baseline(c: CellResult, against: Against) -> Finding:
    entries = [f"{e.build}/{e.mode}" for e in against.baseline.entries]
    return Finding(
        Kind.NO_BASELINE,
        Severity.WARN if against.allow_unmatched else Severity.FAIL,
        c.cell,
        Cause.NO_BASELINE_ENTRY,
        NoBaseline(build=c.build, mode=c.mode, baseline=against.name, entries=entries),
    )


def _check_cell(plan: Plan, c: CellResult, entry: BaselineEntry, out: Checked) -> list[Finding]:
    """One cell against its entry: every position, its AL (an entry without rates, an upstream per-request AL
    golden, has no pooled AL to check either), their findings and the upstream golden's own rule."""
    gate, cert_alpha = plan.gate, plan.cert_alpha
    # Each check at its part's level (plan.split_alpha): the primary endpoint's, or a diagnosis's.
    pos_alpha = plan.alpha_of(gate.primary == "positions")
    al_alpha = plan.alpha_of(gate.primary == "acceptance_length")
    pair = aligned_with(c, entry)
    checks = [position_check(c, i, entry, gate, pos_alpha, cert_alpha, pair) for i in range(len(entry.rates_pct or []))]
    out.checks.extend(checks)
    length = length_check(c, entry, gate, al_alpha, cert_alpha, pair) if entry.rates_pct else None
    if length is not None:
        out.lengths.append(length)
    assert plan.against is not None
    return [
        *check_findings(c, checks, length, gate),
        # The baseline's upstream golden, judged by its own rule beside the gate's verdict (judge/signals/upstream.py).
        *upstream.findings(c, plan.against.baseline, checks, length, gate, al_alpha, cert_alpha),
    ]


def combine(plan: Plan, checked: Checked, diagnosed: Diagnosed | None = None) -> Comparison:
    """The Comparison of the run: the diagnoses first, then the checks' findings. Without `diagnosed`: the
    cells and checks alone (what a report's figures are drawn from while the diagnoses are made)."""
    against = plan.against
    diagnosed = diagnosed or Diagnosed()
    # A lookup method's findings point at the lookup, not at a drafter model it does not have.
    diagnoses = for_method([*diagnosed.findings, *checked.findings], plan.run.typed.config.speculative.method)
    return Comparison(
        plan.run.run_id,
        plan.cells,
        checks=checked.checks,
        lengths=checked.lengths,
        diagnoses=diagnoses,
        baseline=None if against is None else against.name,
        baseline_provenance={} if against is None else against.baseline.provenance.model_dump(exclude_none=True),
        unchecked=checked.unchecked,
        gate=plan.gate,
        greedy=plan.greedy,
        family=plan.family,
        primary=plan.primary,
        binding=diagnosed.binding,
        serving=plan.served,
        fix_headline=plan.evidence.fix_headline,
        role=plan.run.typed.config.role,
        config_baseline=plan.run.typed.config.baseline if against is None else None,
        run_path=str(plan.run.path),
        builds=builds_table(plan.run.typed.config, plan.cells, diagnoses),
        reference=diagnosed.reference,
        context=[t for c in plan.cells if (t := context_table(c)) is not None],
        per_request=diagnosed.per_request,
    )


class PainterHook(Protocol):
    """What `judge` hands the cells and checks to before the diagnoses are made, and the whole verdict after:
    `mtpbench report`'s painter (render/htmlreport.py `Figures`), which draws in another process while this
    one diagnoses, then draws the figures that show the verdicts."""

    def measured(self, run: Run, comp: Comparison) -> None: ...

    def judged(self, run: Run, comp: Comparison) -> None: ...


def judge(
    run: Run,
    baseline: Baseline | None = None,
    gate: GateSpec | None = None,
    *,
    baseline_name: str | None = None,
    baseline_path: str | Path | None = None,
    entry_map: dict[str, str] | None = None,
    allow_unmatched: bool = False,
    accept_unchecked: bool = False,
    run_failed: bool = False,
    evidence: Evidence | None = None,
    painter: PainterHook | None = None,
) -> Comparison:
    """The one judging every command makes (`show`, `compare`, `run`, `report`, `size --run`, `bisect`, the
    selftest): the baseline admitted first (NotComparableError, exit 4, before anything is collected), the
    evidence (collected here unless the caller has it), the checks and the diagnoses, combined. Without a
    baseline: the cells and the diagnoses that need none. `painter`: handed the cells and checks between
    the checks and the diagnoses (`report`)."""
    gate = gate or run.typed.config.gate
    against = None
    if baseline is not None:
        against = admit(
            run,
            baseline,
            baseline_name,
            baseline_path=baseline_path,
            entry_map=entry_map,
            allow_unmatched=allow_unmatched,
            accept_unchecked=accept_unchecked,
        )
    evidence = collect_evidence(run, gate.confidence) if evidence is None else evidence
    plan = make_plan(evidence, gate, against)
    checked = check(plan)
    if painter is not None:
        painter.measured(run, combine(plan, checked))
    comp = combine(plan, checked, diagnose(plan, run_failed))
    if painter is not None:
        painter.judged(run, comp)
    return comp
