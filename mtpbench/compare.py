"""Pure verdicts: a run's cells against a baseline, against each other, and across their repeats.

`collect` turns a run's records into per-cell results (pandas does the grouping); `analyze` names the
bug signatures that need no baseline — graph divergence (a graph/compiled mode differs from the
reference mode at the same build and variant under greedy sampling) and cross-process instability
(greedy repeats in fresh processes disagree); `compare` adds the per-position gate against a baseline.
Thresholds are small objects with `.fails(...) -> message | None` (pytest-benchmark's pattern); all
findings are collected before an exit code is chosen. Acceptance is higher-is-better everywhere.
Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from mtpbench.baseline import Baseline, BaselineEntry, run_fingerprint
from mtpbench.config import GateSpec
from mtpbench.errors import ExitCode, NotComparableError
from mtpbench.results import Run
from mtpbench.stats import Counts, Interval, Summary, diff_interval, homogeneity_pvalue, summarize

FAIL, WARN, INFO = "fail", "warn", "info"


@dataclass
class RepeatResult:
    repeat: int
    hash_seed: int | None
    counts: Counts
    outputs: dict[str, str]  # prompt_id -> sha256 of generated token ids


@dataclass
class CellResult:
    cell: str
    build: str
    mode: str
    variant: str
    summary: Summary
    repeats: list[RepeatResult]
    requested: dict[str, Any] = field(default_factory=dict)
    effective: dict[str, Any] = field(default_factory=dict)
    patches: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    prompts_expected: int = 0
    engine_start_s: float | None = None
    wall_s: float | None = None

    @property
    def complete(self) -> bool:
        return bool(self.statuses) and all(s == "ok" for s in self.statuses)

    @property
    def graph_downgraded(self) -> bool:
        req, eff = self.requested.get("cudagraph_mode"), self.effective.get("cudagraph_mode")
        return bool(req) and req != "NONE" and eff == "NONE"


@dataclass
class PositionCheck:
    cell: str
    pos: int
    run_rate: float | None
    base_rate: float | None
    delta: float | None
    ci: Interval | None
    verdict: str  # pass | regression | improvement | no-data | no-baseline
    message: str = ""


@dataclass
class Diagnosis:
    kind: str  # regression | graph-divergence | cross-process-instability | improvement | text-changed | ...
    severity: str
    cell: str
    message: str
    cause: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comparison:
    run_id: str
    cells: list[CellResult]
    checks: list[PositionCheck] = field(default_factory=list)
    diagnoses: list[Diagnosis] = field(default_factory=list)
    baseline: str | None = None
    baseline_provenance: dict[str, Any] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)
    gate: GateSpec = field(default_factory=GateSpec)
    greedy: bool = True

    @property
    def exit_code(self) -> ExitCode:
        if any(d.severity == FAIL for d in self.diagnoses):
            return ExitCode.REGRESSION
        if any(not c.complete for c in self.cells):
            return ExitCode.RUN_FAILED
        return ExitCode.OK


# --- collecting -------------------------------------------------------------------------------------


def _counts(rows: pd.DataFrame, k: int) -> Counts:
    per_pos = [0] * k
    for vec in rows["accepted_per_pos"]:
        for i, v in enumerate(list(vec)[:k]):
            per_pos[i] += int(v)
    return Counts(
        int(rows["num_drafts"].sum()),
        int(rows["num_draft_tokens"].sum()),
        int(rows["num_accepted_tokens"].sum()),
        tuple(per_pos),
    )


def collect(run: Run, confidence: float = 0.95) -> list[CellResult]:
    cfg = run.manifest["config"]
    k = int(cfg["speculative"]["num_speculative_tokens"])
    n_prompts = len(run.manifest["prompts"].get("ids", []))
    df = run.prompt_frame()
    starts = {(r["cell"], r["repeat"]): r for r in run.cell_starts()}
    order: list[str] = []
    meta: dict[str, dict[str, Any]] = {}
    for c in run.manifest["cells"]:
        if c["cell"] not in meta:
            order.append(c["cell"])
            meta[c["cell"]] = {
                "build": c["build"],
                "mode": c["mode"],
                "variant": c["variant"],
                "statuses": [],
                "seeds": {},
            }
        meta[c["cell"]]["statuses"].append(c.get("status", "pending"))
        meta[c["cell"]]["seeds"][c["repeat"]] = c.get("hash_seed")
    out: list[CellResult] = []
    for cell in order:
        m = meta[cell]
        rows = df[df["cell"] == cell] if len(df) else df
        repeats: list[RepeatResult] = []
        for rep, grp in rows.groupby("repeat", sort=True) if len(rows) else []:
            repeats.append(
                RepeatResult(
                    int(rep),
                    m["seeds"].get(int(rep)),
                    _counts(grp, k),
                    dict(zip(grp["prompt_id"], grp["output_sha256"], strict=True)),
                )
            )
        total = Counts.total(r.counts for r in repeats) if repeats else Counts(accepted_per_pos=(0,) * k)
        first = next((starts[(cell, r)] for r in sorted(m["seeds"]) if (cell, r) in starts), {})
        walls = [s.get("engine_start_s") for (c, _), s in starts.items() if c == cell and s.get("engine_start_s")]
        out.append(
            CellResult(
                cell=cell,
                build=m["build"],
                mode=m["mode"],
                variant=m["variant"],
                summary=summarize(total, confidence, [r.counts for r in repeats]),
                repeats=repeats,
                requested=first.get("requested", {}),
                effective=first.get("effective", {}),
                patches=first.get("patches", []),
                statuses=m["statuses"],
                prompts_expected=n_prompts,
                engine_start_s=(sum(walls) / len(walls)) if walls else None,
                wall_s=float(rows["wall_s"].sum()) if len(rows) else None,
            )
        )
    return out


# --- thresholds ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DropThreshold:
    """A position regresses when it is below its reference by more than `pts` points *and* the interval
    on the difference lies wholly below zero (the data supports a drop at all)."""

    pts: float

    def fails(self, delta: float, ci: Interval | None) -> bool:
        return delta < -self.pts / 100 and ci is not None and ci.high < 0

    def improves(self, delta: float, ci: Interval | None) -> bool:
        return delta > self.pts / 100 and ci is not None and ci.low > 0


@dataclass(frozen=True)
class SpreadThreshold:
    """Greedy repeats disagree when their per-position rates span more than `pts` points and a
    chi-square test rejects one shared rate at the gate's confidence."""

    pts: float
    confidence: float

    def fails(self, spread: float, pvalue: float | None) -> bool:
        return spread > self.pts / 100 and pvalue is not None and pvalue < 1 - self.confidence


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _pts(x: float) -> str:
    return f"{100 * x:+.1f} pts"


# --- diagnoses without a baseline -------------------------------------------------------------------


def _reference_mode(cfg: dict[str, Any], cells: list[CellResult]) -> str | None:
    if cfg.get("reference_mode"):
        return str(cfg["reference_mode"])
    for c in cells:
        if c.requested.get("enforce_eager") or c.requested.get("cudagraph_mode") == "NONE":
            return c.mode
    for name, spec in cfg.get("modes", {}).items():
        if spec.get("enforce_eager") or spec.get("cudagraph_mode") == "NONE":
            return str(name)
    return None


def _instability(cell: CellResult, gate: GateSpec) -> Diagnosis | None:
    if len(cell.repeats) < 2:
        return None
    th = SpreadThreshold(gate.instability_pts, gate.confidence)
    worst: tuple[int, float, float | None] | None = None
    for i, spread in enumerate(cell.summary.spread):
        if spread is None:
            continue
        p = homogeneity_pvalue(
            [r.counts.accepted_per_pos[i] for r in cell.repeats], [r.counts.num_drafts for r in cell.repeats]
        )
        if th.fails(spread, p) and (worst is None or spread > worst[1]):
            worst = (i, spread, p)
    if worst is None:
        return None
    i, spread, p = worst
    per_seed = ", ".join(
        f"PYTHONHASHSEED={r.hash_seed}: {_pct(r.counts.accepted_per_pos[i] / r.counts.num_drafts)}"
        for r in cell.repeats
        if r.counts.num_drafts
    )
    same_text = len({tuple(sorted(r.outputs.items())) for r in cell.repeats}) == 1
    text = (
        "generated text identical across repeats, so the drafter's inputs, not the target, vary"
        if same_text
        else "generated text also differs across repeats"
    )
    return Diagnosis(
        kind="cross-process-instability",
        severity=FAIL,
        cell=cell.cell,
        message=f"greedy repeats disagree at pos{i}: {per_seed} (spread {100 * spread:.1f} pts, p={p:.2g}); {text}",
        cause=(
            "order-dependent state: something iterated from a set/dict (hash-seed dependent) decides what the "
            "draft reads, e.g. which KV-cache group's attention metadata the draft layers are bound to"
        ),
        numbers={"pos": i, "spread": spread, "pvalue": p, "same_text": same_text,
                 "per_seed": {str(r.hash_seed): r.counts.accepted_per_pos[i] / r.counts.num_drafts
                              for r in cell.repeats if r.counts.num_drafts}},
    )  # fmt: skip


def _divergence(cell: CellResult, ref: CellResult, gate: GateSpec) -> Diagnosis | None:
    th = DropThreshold(gate.divergence_pts)
    worst: tuple[int, float, Interval] | None = None
    a, b = cell.summary.counts, ref.summary.counts
    for i in range(min(a.k, b.k)):
        if not a.num_drafts or not b.num_drafts:
            continue
        delta = a.accepted_per_pos[i] / a.num_drafts - b.accepted_per_pos[i] / b.num_drafts
        ci = diff_interval(
            a.accepted_per_pos[i], a.num_drafts, b.accepted_per_pos[i], b.num_drafts, 0.0, gate.confidence
        )
        diverges = th.fails(delta, ci) or th.improves(delta, ci)
        if diverges and ci is not None and (worst is None or abs(delta) > abs(worst[1])):
            worst = (i, delta, ci)
    if worst is None:
        return None
    i, delta, ci = worst
    same_text = _same_outputs(cell, ref)
    graphs = cell.effective.get("cudagraph_mode") not in (None, "NONE")
    what = "graph mode" if graphs else "compiled mode"
    note = "" if graphs else f" (effective cudagraph_mode {cell.effective.get('cudagraph_mode')}: no graphs ran)"
    text = (
        "identical generated text: the target is unaffected, the draft path differs"
        if same_text
        else ("generated text differs too: the target's numerics changed in this mode")
    )
    return Diagnosis(
        kind="graph-divergence",
        severity=FAIL,
        cell=cell.cell,
        message=(
            f"{what} {cell.mode} differs from {ref.mode} at the same build and variant: pos{i} "
            f"{_pct(cell.summary.per_pos[i])} vs {_pct(ref.summary.per_pos[i])} ({_pts(delta)}){note}; {text}"
        ),
        cause=(
            "draft-side state that only graph/compiled replay uses: per-layer draft attention metadata "
            "flattened to one layer, or graph parameter updates not resolved per layer / KV-cache group"
        ),
        numbers={
            "pos": i,
            "delta": delta,
            "ci": [ci.low, ci.high],
            "reference": ref.cell,
            "same_text": same_text,
        },
    )


def _same_outputs(a: CellResult, b: CellResult) -> bool:
    oa = {pid: sha for r in a.repeats for pid, sha in r.outputs.items()}
    ob = {pid: sha for r in b.repeats for pid, sha in r.outputs.items()}
    common = set(oa) & set(ob)
    return all(oa[p] == ob[p] for p in common)


def _text_changes(cells: list[CellResult]) -> list[Diagnosis]:
    """Greedy: the target verifies every token, so text must be the same in every cell of a build."""
    out: list[Diagnosis] = []
    by_build: dict[str, list[CellResult]] = {}
    for c in cells:
        by_build.setdefault(c.build, []).append(c)
    for build, group in by_build.items():
        seen: dict[str, set[str]] = {}
        for c in group:
            for r in c.repeats:
                for pid, sha in r.outputs.items():
                    seen.setdefault(pid, set()).add(sha)
        changed = sorted(p for p, s in seen.items() if len(s) > 1)
        if changed:
            out.append(
                Diagnosis(
                    kind="text-changed",
                    severity=WARN,
                    cell=f"{build}/*",
                    message=f"greedy output differs across cells/repeats of build {build} "
                    f"for prompts {', '.join(changed)}",
                    cause="the target's numerics changed (kernels, graphs, dtype), not only the drafter",
                    numbers={"prompts": changed},
                )
            )
    return out


def analyze(run: Run, gate: GateSpec | None = None) -> Comparison:
    cfg = run.manifest["config"]
    gate = gate or GateSpec.model_validate(cfg.get("gate", {}))
    cells = collect(run, gate.confidence)
    greedy = float(cfg.get("sampling", {}).get("temperature", 0.0)) == 0.0
    comp = Comparison(run.run_id, cells, gate=gate, greedy=greedy)
    for c in cells:
        if not c.complete:
            bad = [s for s in c.statuses if s != "ok"]
            comp.diagnoses.append(
                Diagnosis(
                    "run-failed",
                    WARN,
                    c.cell,
                    f"{len(bad)} of {len(c.statuses)} repeats did not finish ({', '.join(sorted(set(bad)))})",
                )
            )
        if c.graph_downgraded:
            comp.diagnoses.append(
                Diagnosis(
                    "graph-mode-downgraded", WARN, c.cell,
                    f"requested cudagraph_mode {c.requested.get('cudagraph_mode')} ran as "
                    f"{c.effective.get('cudagraph_mode')} on {c.effective.get('device_type') or 'this platform'}",
                )
            )  # fmt: skip
    comp.diagnoses.extend(_serving_diagnoses(run))
    # A variant whose patch did not apply measured the unpatched code under its name (mtpbench.fixes.status).
    from mtpbench.fixes.status import unapplied

    comp.diagnoses.extend(Diagnosis(u.kind, u.severity, u.cell, u.message) for u in unapplied(run.cell_starts()))
    if not greedy:
        # Sampled runs legitimately differ between processes and modes: only the baseline gate applies.
        return comp
    for c in cells:
        d = _instability(c, gate)
        if d:
            comp.diagnoses.append(d)
    ref_mode = _reference_mode(cfg, cells)
    if ref_mode:
        refs = {(c.build, c.variant): c for c in cells if c.mode == ref_mode}
        for c in cells:
            ref = refs.get((c.build, c.variant))
            if ref is None or c is ref:
                continue
            d = _divergence(c, ref, gate)
            if d:
                comp.diagnoses.append(d)
    comp.diagnoses.extend(_text_changes(cells))
    return comp


def _serving_diagnoses(run: Run) -> list[Diagnosis]:
    # Serving workload (mtpbench/serving_summary.py): failed requests, /metrics vs per-request counts.
    from mtpbench import serving_summary

    return serving_summary.diagnoses(run)


# --- against a baseline -----------------------------------------------------------------------------


def _same_value(a: Any, b: Any) -> bool:
    numeric = (int, float)
    if isinstance(a, numeric) and isinstance(b, numeric) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return bool(a == b)


def check_comparable(run: Run, baseline: Baseline) -> list[str]:
    """Raise NotComparableError on any recorded mismatch; return the fields the baseline could not vouch for."""
    rf = run_fingerprint(run)
    bf = baseline.fingerprint
    mismatches: list[str] = []
    unchecked: list[str] = []
    if rf["method"].lower() != bf.method.lower():
        mismatches.append(f"method {rf['method']} vs baseline {bf.method}")
    if int(rf["num_speculative_tokens"]) != bf.num_speculative_tokens:
        mismatches.append(f"k={rf['num_speculative_tokens']} vs baseline k={bf.num_speculative_tokens}")
    for key in (
        "model_config_sha256", "drafter_config_sha256", "model_weights_sha256", "drafter_weights_sha256",
        "prompts_sha256",
    ):  # fmt: skip
        want = getattr(bf, key)
        if want is None:
            unchecked.append(key)
        elif rf.get(key) != want:
            mismatches.append(f"{key} {str(rf.get(key))[:12]} vs baseline {want[:12]}")
    for key, want in bf.sampling.items():
        have = rf["sampling"].get(key)
        if not _same_value(have, want):
            mismatches.append(f"sampling.{key}={have} vs baseline {want}")
    if "temperature" not in bf.sampling:
        unchecked.append("sampling.temperature")
    if mismatches:
        raise NotComparableError(
            f"run {run.run_id} is not comparable with baseline {baseline.name}: " + "; ".join(mismatches)
        )
    return unchecked


def _entry_checks(c: CellResult, entry: BaselineEntry | None, gate: GateSpec) -> list[PositionCheck]:
    th = DropThreshold(gate.tolerance_pts)
    out: list[PositionCheck] = []
    s = c.summary
    for i in range(s.counts.k):
        run_rate = s.per_pos[i]
        if entry is None:
            out.append(
                PositionCheck(
                    c.cell,
                    i,
                    run_rate,
                    None,
                    None,
                    None,
                    "no-baseline",
                    "no baseline entry for this build/mode",
                )
            )
            continue
        base_rate = entry.rates_pct[i] / 100
        if run_rate is None:
            out.append(PositionCheck(c.cell, i, None, base_rate, None, None, "no-data", "no drafts recorded"))
            continue
        bc = entry.counts
        ci = diff_interval(
            s.counts.accepted_per_pos[i], s.counts.num_drafts,
            bc.accepted_per_pos[i] if bc else None, bc.num_drafts if bc else None, base_rate, gate.confidence,
        )  # fmt: skip
        delta = run_rate - base_rate
        verdict, msg = "pass", ""
        if th.fails(delta, ci):
            verdict = "regression"
            msg = (
                f"pos{i} {_pct(run_rate)} vs baseline {_pct(base_rate)} ({_pts(delta)}, "
                f"tolerance {gate.tolerance_pts:g} pts)"
            )
        elif th.improves(delta, ci):
            verdict = "improvement"
            msg = f"pos{i} {_pct(run_rate)} vs baseline {_pct(base_rate)} ({_pts(delta)}): baseline may be stale"
        out.append(PositionCheck(c.cell, i, run_rate, base_rate, delta, ci, verdict, msg))
    return out


def compare(run: Run, baseline: Baseline, gate: GateSpec | None = None, baseline_name: str | None = None) -> Comparison:
    from mtpbench import serving_summary

    # Only entries of the run's workload (serving vs offline, same concurrency/max_tokens), else exit 4.
    baseline, serving_unchecked = serving_summary.select_baseline(run, baseline)
    unchecked = check_comparable(run, baseline) + serving_unchecked
    unchecked += serving_summary.throughput_unchecked(run, baseline)
    comp = analyze(run, gate)
    comp.baseline = baseline_name or baseline.name
    comp.baseline_provenance = baseline.provenance.model_dump(exclude_none=True)
    comp.unchecked = unchecked
    for c in comp.cells:
        entry = baseline.entry_for(c.build, c.mode, c.requested.get("cudagraph_mode"))
        checks = _entry_checks(c, entry, comp.gate)
        comp.checks.extend(checks)
        regs = [x for x in checks if x.verdict == "regression"]
        if regs:
            comp.diagnoses.append(
                Diagnosis(
                    "regression", FAIL, c.cell, "; ".join(x.message for x in regs),
                    cause="the drafter's tokens are accepted less often than the baseline's on the same prompts",
                    numbers={"positions": [x.pos for x in regs], "deltas": [x.delta for x in regs]},
                )
            )  # fmt: skip
        imps = [x for x in checks if x.verdict == "improvement"]
        if imps:
            sev = FAIL if comp.gate.fail_on_improvement else INFO
            comp.diagnoses.append(Diagnosis("improvement", sev, c.cell, "; ".join(x.message for x in imps)))
        if entry is None:
            comp.diagnoses.append(
                Diagnosis(
                    "no-baseline",
                    WARN,
                    c.cell,
                    f"baseline {comp.baseline} has no entry for {c.build}/{c.mode}",
                )
            )
    comp.diagnoses.extend(serving_summary.throughput_diagnoses(run, baseline))
    return comp
