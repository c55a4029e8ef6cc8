"""Pure verdicts: a run's cells against a baseline, against each other, and across their repeats.

`collect` turns a run's records into per-cell evidence with pandas/numpy column operations (no Python
loop over prompt records): repeats that did not finish, or recorded fewer prompts than the run asked for,
are kept for display but excluded from every verdict; identical repeats of a prompt (same counts, same
output sha256) count once; each prompt is one cluster of evidence (stats.py says why). `analyze` names
what needs no baseline (diagnoses.py) — speculation off, partial repeats, cross-process instability (exact
under greedy decoding, a prompt-level permutation test when sampling), graph divergence, text changes;
`compare` adds the per-position gate against a baseline (checks.py), fail-closed: a cell with no baseline
entry is not comparable, a baseline that cannot vouch for the model is refused unless named, a drop beyond
the tolerance that the data cannot support is `inconclusive`, never a pass.

Findings are structured (enums for verdict, severity, kind and cause; numbers); render/words.py words them.
The exit code comes from the findings through the one policy in errors.py. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtpbench.errors import ExitCode, NotComparableError, combine_exit_codes
from mtpbench.fixes.status import unapplied
from mtpbench.judge import serving_summary, upstream
from mtpbench.judge.binding import binding_findings, cell_bindings
from mtpbench.judge.checks import (
    IDENTITY_FIELDS,
    LengthCheck,
    PositionCheck,
    _check_findings,
    _length_check,
    _position_check,
    aligned_with,
    check_comparable,
    config_names_baseline,
    resolve_entry,
)
from mtpbench.judge.diagnoses import (
    _cell_health,
    _divergence,
    _divergence_pairs,
    _instability,
    _serving_diagnoses,
    _text_changes,
    _unapplied,
    sampler_broken,
)
from mtpbench.judge.drift import drift_findings
from mtpbench.judge.evidence import CellResult, RepeatResult, collect
from mtpbench.judge.findings import (
    FAIL,
    INFO,
    KIND_EXIT,
    WARN,
    Cause,
    Finding,
    Kind,
    NoBaseline,
    RunFailed,
    Severity,
    Unchecked,
    Verdict,
)
from mtpbench.judge.replay import replay_findings
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import Baseline, BaselineEntry
from mtpbench.store.results import Run

__all__ = [
    "FAIL",
    "INFO",
    "KIND_EXIT",
    "WARN",
    "Cause",
    "CellResult",
    "Comparison",
    "Finding",
    "Kind",
    "PositionCheck",
    "RepeatResult",
    "Severity",
    "Verdict",
    "analyze",
    "collect",
    "compare",
]


@dataclass
class Comparison:
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
    # The run's statistical checks (positions x cells against the baseline, graph divergence): its
    # false-alarm rate is split evenly among them (Bonferroni), so a harmless run fails at most that often.
    family: int = 1
    # The checks a pass certifies (gate.primary: a cell's AL, or its k positions, per cell): the certificate's
    # confidence (gate.confidence) is simultaneous over them (Bonferroni).
    primary: int = 1
    # Per probed cell, the metadata-binding probe's layer × group table (judge/binding.py `document`).
    binding: dict[str, Any] = field(default_factory=dict)

    @property
    def findings(self) -> list[Finding]:
        return self.diagnoses

    @property
    def alpha(self) -> float:
        """One check's share of the run's false-alarm rate (one-sided)."""
        return self.gate.false_alarm / max(self.family, 1)

    @property
    def cert_alpha(self) -> float:
        """One primary check's share of 1 − confidence: the one-sided level of the lower bound a pass needs."""
        return (1.0 - self.gate.confidence) / max(self.primary, 1)

    @property
    def exit_code(self) -> ExitCode:
        return combine_exit_codes(f.exit_code for f in self.diagnoses)


Measured = Callable[["Comparison"], None]


def analyze(
    run: Run,
    gate: GateSpec | None = None,
    run_failed: bool = False,
    *,
    measured: Measured | None = None,
    baseline_checks: int = 0,
    primary_checks: int = 1,
) -> Comparison:
    """The run's cells and their diagnoses. `measured(comp)` is called once the cells are known and before
    any diagnosis is made: it may read the cells (and the checks, under compare), nothing else. The report
    draws its figures in another process meanwhile; the diagnoses take as long again as collecting."""
    cfg = run.typed.config
    gate = gate or cfg.gate
    cells = collect(run, gate.confidence)
    greedy = cfg.sampling.temperature == 0.0
    pairs = _divergence_pairs(cfg, cells, greedy)
    comp = Comparison(
        run.run_id,
        cells,
        gate=gate,
        greedy=greedy,
        primary=primary_checks,
        family=baseline_checks + sum(c.evidence.k or run.typed.k for c, _ in pairs),
    )
    if measured is not None:
        measured(comp)
    for c in cells:
        comp.diagnoses.extend(_cell_health(c))
    if run_failed and not any(d.kind == Kind.RUN_FAILED for d in comp.diagnoses):
        comp.diagnoses.append(
            Finding(Kind.RUN_FAILED, Severity.FAIL, "*", Cause.INCOMPLETE_REPEATS, RunFailed(excluded=[]))
        )
    comp.diagnoses.extend(_serving_diagnoses(run, cells))
    # A variant whose patch did not apply measured the unpatched code under its name (mtpbench.fixes.status).
    comp.diagnoses.extend(_unapplied(u) for u in unapplied(run.cell_starts()))
    comp.diagnoses.extend(sampler_broken(run.cell_starts()))
    # Which KV-cache group each draft layer read, where the variant asked for the probe (judge/binding.py).
    bindings = cell_bindings(run)
    comp.binding = {c: b.document() for c, b in bindings.items() if b.repeats or b.missing}
    comp.diagnoses.extend(binding_findings(bindings))
    comp.diagnoses.extend(replay_findings(cells, run.cell_starts(), run.cell_ends()))
    for c in cells:
        d = _instability(c, gate, greedy)
        if d:
            comp.diagnoses.append(d)
    # Soak cells: drift between the rounds of one engine, rounds that accepted nothing, stalls (judge/drift.py).
    soak = [c for c in cells if c.rounds is not None or c.round_ends]
    for c in soak:
        comp.diagnoses.extend(drift_findings(c, gate, greedy, gate.false_alarm / len(soak)))
    if not greedy:
        # Sampled runs legitimately differ between modes and in their text: only the tests above apply.
        return comp
    for c, ref in pairs:
        d = _divergence(c, ref, gate, comp.alpha)
        if d:
            comp.diagnoses.append(d)
    comp.diagnoses.extend(_text_changes(cells))
    return comp


def compare(
    run: Run,
    baseline: Baseline,
    gate: GateSpec | None = None,
    baseline_name: str | None = None,
    *,
    baseline_path: str | Path | None = None,
    entry_map: dict[str, str] | None = None,
    allow_unmatched: bool = False,
    accept_unchecked: bool = False,
    run_failed: bool = False,
    measured: Measured | None = None,
) -> Comparison:
    """analyze, then each cell checked against its baseline entry. `measured` as in analyze, with the checks
    made: they depend on the cells and the baseline only, so they are made before the diagnoses, and their
    findings are added after them (the order the diagnoses have always had)."""
    name = baseline_name or baseline.name
    # Only entries of the run's workload (serving vs offline, same concurrency/max_tokens), else exit 4.
    baseline, serving_unchecked = serving_summary.select_baseline(run, baseline)
    unchecked = check_comparable(run, baseline, name)
    named = config_names_baseline(run, baseline, baseline_path if baseline_path is not None else baseline_name)
    if unchecked and not (accept_unchecked or named):
        raise NotComparableError(
            f"baseline {name} cannot check {', '.join(unchecked)} of run {run.run_id}: it may describe another "
            "model, drafter or prompt set. Use it only if the run's config names it as its baseline, or pass "
            "--accept-unchecked",
            run.run_id,
            name,
            [f"unchecked: {u}" for u in unchecked],
            unchecked,
        )
    late: list[Finding] = []  # the checks' findings, after analyze's own
    resolved: dict[str, BaselineEntry] = {}  # cell -> the entry that judged it (acceptance and throughput alike)

    def judge(comp: Comparison) -> None:
        comp.baseline = name
        comp.baseline_provenance = baseline.provenance.model_dump(exclude_none=True)
        # Workload fields a serving baseline did not record are listed, not refused: they do not decide what
        # was measured (model, drafter, prompts), only how fast.
        comp.unchecked = unchecked + serving_unchecked + serving_summary.throughput_unchecked(run, baseline)
        if comp.unchecked:
            identity = [u for u in comp.unchecked if u in IDENTITY_FIELDS or u.startswith("sampling.")]
            by = None if not identity else "config" if named else "flag"
            late.append(
                Finding(
                    Kind.UNCHECKED,
                    Severity.INFO,
                    "*",
                    Cause.UNVERIFIED_IDENTITY,
                    Unchecked(fields=comp.unchecked, identity=identity, accepted_by=by),
                )
            )
        emap = dict(run.typed.config.baseline_entry)
        emap.update(entry_map or {})
        for c in comp.cells:
            entry, _rule = resolve_entry(baseline, c, emap, name)
            if entry is not None:
                resolved[c.cell] = entry
            if entry is None:
                comp.checks.extend(
                    PositionCheck(c.cell, i, c.summary.per_pos[i], None, None, None, Verdict.NO_BASELINE)
                    for i in range(c.evidence.k)
                )
                entries = [f"{e.build}/{e.mode}" for e in baseline.entries]
                sev = Severity.WARN if allow_unmatched else Severity.FAIL
                late.append(
                    Finding(
                        Kind.NO_BASELINE,
                        sev,
                        c.cell,
                        Cause.NO_BASELINE_ENTRY,
                        NoBaseline(build=c.build, mode=c.mode, baseline=name, entries=entries),
                    )
                )
                continue
            pair = aligned_with(c, entry)
            checks = [
                _position_check(c, i, entry, comp.gate, comp.alpha, comp.cert_alpha, pair)
                for i in range(len(entry.rates_pct or []))
            ]
            comp.checks.extend(checks)
            # An entry without rates (an upstream per-request AL golden) has no pooled AL to check either.
            length = _length_check(c, entry, comp.gate, comp.alpha, comp.cert_alpha, pair) if entry.rates_pct else None
            if length is not None:
                comp.lengths.append(length)
            late.extend(_check_findings(c, checks, length, comp.gate))
            # The baseline's upstream golden, judged by its own rule beside the gate's verdict (judge/upstream.py).
            late.extend(upstream.findings(c, baseline, checks, length, comp.gate, comp.alpha, comp.cert_alpha))
        if measured is not None:
            measured(comp)

    # Every cell's AL and each of its positions is one check against the baseline (a cell without an entry
    # too: it fails anyway); the primary ones are what a pass certifies.
    n_cells, k = len({c.cell for c in run.typed.cells}), run.typed.k
    g = gate or run.typed.config.gate
    n_primary = n_cells * (k if g.primary == "positions" else 1)
    comp = analyze(run, gate, run_failed, measured=judge, baseline_checks=n_cells * (k + 1), primary_checks=n_primary)
    comp.diagnoses.extend(late)
    comp.diagnoses.extend(serving_summary.throughput_diagnoses(run, resolved, comp.cells))
    return comp
