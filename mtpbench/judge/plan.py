"""What one judging of a run rests on, settled before any check or diagnosis is made: the evidence (collected
once, evidence.py), the gate, the baseline admitted for it (`admit`: comparable or refused, exit 4), the
serving summary, the graph cells paired with their eager reference, and the run's family of statistical
checks, counted here and only here, with the split of its false-alarm rate (`split_alpha`): a fixed share
(PRIMARY_SHARE) for the primary checks a pass certifies, the rest for the diagnoses (the other positions or
AL, graph divergence), each part split evenly among its checks (Bonferroni within each part, so the whole
still holds the run's rate). Adding a graph mode or a position then no longer thins the primary endpoint's
level: its power to catch δ, and its chance to certify δ on a harmless run, stay what it was sized for.

checks (via compare.check) and diagnoses.diagnose both read a `Plan`; compare.combine puts their results
together into the Comparison. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mtpbench.errors import NotComparableError
from mtpbench.judge.checks import check_comparable, config_names_baseline
from mtpbench.judge.evidence import CellResult, Evidence
from mtpbench.judge.signals import serving_summary
from mtpbench.judge.signals.builds import build_pairs
from mtpbench.judge.signals.concurrency import sweep_checks
from mtpbench.judge.signals.context import context_checks
from mtpbench.judge.signals.ksweep import k_pairs
from mtpbench.judge.signals.serving_summary import ServingCell
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import Baseline
from mtpbench.store.manifest import ManifestConfig
from mtpbench.store.results import Run

Pair = tuple[CellResult, CellResult]  # a non-reference cell (graph or feature mode) and its reference cell

# The primary endpoint's share of the run's false-alarm rate (issue 30): fixed, so that diagnoses added to a
# run (graph modes, positions) take from the diagnoses' share only. Half: the diagnoses keep enough level to
# find a collapse at one position (the seed's bug), the primary check loses at most a factor 2 against
# having the whole rate alone.
PRIMARY_SHARE = 0.5


@dataclass(frozen=True)
class AlphaSplit:
    """The run's false-alarm rate split between its primary checks and its diagnoses, one-sided, per check."""

    primary: float  # one primary check's level (a cell's AL, or each position under gate.primary positions)
    diagnosis: float  # one diagnosis check's level (the other baseline checks, graph divergence)


def split_alpha(false_alarm: float, primary: int, diagnoses: int) -> AlphaSplit:
    """PRIMARY_SHARE of `false_alarm` over the `primary` checks, the rest over the `diagnoses`; a part with no
    checks leaves its share to the other (a run judged without a baseline has only diagnoses)."""
    if primary <= 0:
        share = 0.0
    elif diagnoses <= 0:
        share = 1.0
    else:
        share = PRIMARY_SHARE
    return AlphaSplit(
        primary=false_alarm * share / max(primary, 1),
        diagnosis=false_alarm * (1.0 - share) / max(diagnoses, 1),
    )


class Levels:
    """The levels of a judging's checks, defined once for the Plan and the Comparison made from it: a class
    with a `gate`, a `family` (the run's statistical checks) and a `primary` count (the checks a pass
    certifies) gets the false-alarm split and every per-check level from here."""

    gate: GateSpec
    family: int
    primary: int

    @property
    def split(self) -> AlphaSplit:
        return split_alpha(self.gate.false_alarm, self.primary, self.family - self.primary)

    @property
    def alpha(self) -> float:
        """One diagnosis check's share of the run's false-alarm rate (one-sided)."""
        return self.split.diagnosis

    @property
    def primary_alpha(self) -> float:
        """One primary check's share of the run's false-alarm rate (one-sided)."""
        return self.split.primary

    def alpha_of(self, primary: bool) -> float:
        return self.split.primary if primary else self.split.diagnosis

    @property
    def cert_alpha(self) -> float:
        """One primary check's share of 1 − confidence: the one-sided level of the lower bound a pass needs."""
        return (1.0 - self.gate.confidence) / max(self.primary, 1)


def count_family(k: int, cells: int, graph_pairs_k: int, primary: str, *, against: bool = True) -> tuple[int, int]:
    """(the run's checks, its primary ones): against a baseline every cell's AL and each of its k positions is
    one check (a cell without an entry too: it fails anyway), the primary ones per cell its AL (or its k
    positions under gate.primary positions); graph divergence adds `graph_pairs_k` (k per graph cell paired
    with its eager reference). Without a baseline there is no primary check."""
    return count_family_ks([k] * cells, graph_pairs_k, primary, against=against)


def count_family_ks(ks: list[int], graph_pairs_k: int, primary: str, *, against: bool = True) -> tuple[int, int]:
    """count_family with each cell's own k (a k sweep, issue 38): a cell at k makes k + 1 checks."""
    if not against:
        return graph_pairs_k, 0
    family = sum(k + 1 for k in ks) + graph_pairs_k
    return family, sum(k if primary == "positions" else 1 for k in ks)


@dataclass(frozen=True)
class Against:
    """A baseline admitted to judge a run: restricted to the run's workload, and what it could not vouch for."""

    baseline: Baseline
    name: str
    unchecked: list[str]  # identity / sampling fields it could not check (accepted by the config or the flag)
    named: bool  # the run's own config names it as its baseline
    serving_unchecked: list[str] = field(default_factory=list)
    entry_map: dict[str, str] = field(default_factory=dict)  # cell or build/mode -> build/mode of an entry
    allow_unmatched: bool = False


def admit(
    run: Run,
    baseline: Baseline,
    baseline_name: str | None = None,
    *,
    baseline_path: str | Path | None = None,
    entry_map: dict[str, str] | None = None,
    allow_unmatched: bool = False,
    accept_unchecked: bool = False,
) -> Against:
    """The baseline as a judging uses it, or NotComparableError (exit 4): a recorded mismatch of method, k,
    identity, sampling or workload; or identity fields it cannot vouch for that neither the run's config
    (it names this baseline) nor `accept_unchecked` accepts. Decided before the evidence is collected."""
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
    entries = dict(run.typed.config.baseline_entry)
    entries.update(entry_map or {})
    return Against(baseline, name, unchecked, named, serving_unchecked, entries, allow_unmatched)


@dataclass(frozen=True)
class Plan(Levels):
    evidence: Evidence
    gate: GateSpec
    greedy: bool
    pairs: list[Pair]  # graph cells and their eager reference (greedy runs only)
    # The run's statistical checks (positions and AL × cells against the baseline, graph divergence): the
    # false-alarm rate is split among them (`split`), so a harmless run fails at most that often.
    family: int
    # The checks a pass certifies (gate.primary: a cell's AL, or its k positions, per cell; 0 without a
    # baseline): the certificate's confidence (gate.confidence) is simultaneous over them.
    primary: int
    served: list[ServingCell] | None  # the serving summary (serving runs only), made once
    against: Against | None = None
    # Cells of the other builds and the reference build's cell of their mode and variant (judge/signals/builds.py):
    # build divergence, counted in the family with the graph pairs.
    build_pairs: list[Pair] = field(default_factory=list)
    # A greedy k sweep's cells and the smallest k's cell of their build/mode/variant (judge/signals/ksweep.py): one
    # pos0 check each, counted in the family with the graph pairs.
    k_pairs: list[Pair] = field(default_factory=list)

    @property
    def run(self) -> Run:
        return self.evidence.run

    @property
    def cells(self) -> list[CellResult]:
        return self.evidence.cells


def make_plan(evidence: Evidence, gate: GateSpec | None = None, against: Against | None = None) -> Plan:
    run = evidence.run
    cfg = run.typed.config
    gate = gate or cfg.gate
    greedy = cfg.sampling.temperature == 0.0
    pairs = divergence_pairs(cfg, evidence.cells, greedy)
    builds = build_pairs(cfg, evidence.cells)
    k = run.typed.k
    ks = k_pairs(evidence.cells, greedy, cfg.speculative.method)
    # A context sweep's buckets held against its first (judge/signals/context.py): greedy only, as divergence.
    context = sum(context_checks(c) for c in evidence.cells) if greedy else 0
    n_cells = len({c.cell for c in run.typed.cells})
    # a serving concurrency sweep's level pairs are greedy divergence checks too (judge/signals/concurrency.py)
    sweep = sweep_checks(run, n_cells) if greedy else 0
    # A build pair is k checks, as a graph pair is: its drop fails, a rise is only told (judge/signals/builds.py).
    # A k pair is one check: pos0 only is held across k (judge/signals/ksweep.py).
    divergence_checks = sum(c.evidence.k or k for c, _ in [*pairs, *builds]) + sweep + context + len(ks)
    cell_ks = run.typed.cell_ks()
    family, primary = count_family_ks(
        [cell_ks[c] for c in dict.fromkeys(c.cell for c in run.typed.cells)],
        divergence_checks,
        gate.primary,
        against=against is not None,
    )
    served = serving_summary.summarize_serving(run, evidence=evidence) if serving_summary.is_serving(run) else None
    return Plan(evidence, gate, greedy, pairs, family, primary, served, against, builds, ks)


def reference_mode(cfg: ManifestConfig, cells: list[CellResult]) -> str | None:
    if cfg.reference_mode:
        return cfg.reference_mode
    for c in cells:
        if c.requested.get("enforce_eager") or c.requested.get("cudagraph_mode") == "NONE":
            return c.mode
    for name, spec in cfg.modes.items():
        if spec.get("enforce_eager") or spec.get("cudagraph_mode") == "NONE":
            return str(name)
    return None


def divergence_pairs(cfg: ManifestConfig, cells: list[CellResult], greedy: bool) -> list[Pair]:
    """(cell, its eager reference) for every graph/compiled cell of a greedy run."""
    ref_mode = reference_mode(cfg, cells) if greedy else None
    if not ref_mode:
        return []
    refs = {(c.build, c.variant): c for c in cells if c.mode == ref_mode}
    return [
        (c, refs[(c.build, c.variant)])
        for c in cells
        if (c.build, c.variant) in refs and c is not refs[(c.build, c.variant)]
    ]
