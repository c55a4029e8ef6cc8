"""`mtpbench history`: per-position acceptance of the same config across runs, and where it moved.

Runs are grouped by what makes them comparable (run_fingerprint: model and drafter identity, method, k,
prompt-set sha256, sampling); runs of different groups are never mixed, each group gets its own table,
plot and change points. Within a group runs are ordered by creation time and labelled by date, build
version (vllm / vllm-ascend, from the workers' fingerprints) and git sha where recorded.

Change points: for every cell × position, binary segmentation over the run sequence. The best split is
the one with the largest weighted between-segment sum of squares of the runs' rates; it is accepted when
the pooled rates on either side differ by more than the tolerance *and* a permutation test says the split
is not chance. The permutation test's units are prompts (DESIGN: the prompt is the unit of evidence): each
run contributes its per-prompt rates (pooled over repeats; prompts folded into at most MAX_UNITS buckets
per run so that a serving run of 10⁶ requests stays cheap), the units are shuffled across the run slots
and the best-split statistic recomputed (the maximum over splits, so the search itself is paid for).
Accepted splits are searched again on both sides. The first change point is named with its numbers and
with what changed in the fingerprint between the run before and the run at the change. Nothing here prints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mtpbench.errors import UserError
from mtpbench.judge.evidence import Evidence, collect_evidence
from mtpbench.judge.stats import Interval, PromptCounts, diff_interval
from mtpbench.specs import DEFAULT_TOLERANCE_PTS
from mtpbench.store.baseline import run_fingerprint
from mtpbench.store.manifest import MANIFEST, write_json_atomic
from mtpbench.store.records import RECORDS
from mtpbench.store.results import Run, load_run

MAX_UNITS = 256  # per run and cell: prompts beyond this are pooled into hash buckets
PERMUTATIONS = 999


@dataclass
class RunPoint:
    """One run of a group: where it came from and its pooled counts per cell."""

    run_id: str
    path: Path
    created: str
    versions: dict[str, str]
    git_sha: dict[str, str]
    # cell -> (drafts, accepted per position); per cell also per-unit (drafts, accepted) arrays
    counts: dict[str, tuple[int, list[int]]]
    units: dict[str, tuple[np.ndarray, np.ndarray]] = field(repr=False, default_factory=dict)
    patches: dict[str, list[str]] = field(default_factory=dict)
    effective: dict[str, str | None] = field(default_factory=dict)
    tool_version: str | None = None
    status: str = ""
    # Cells with a repeat that did not finish (or is still running): shown, never used to find a change.
    incomplete: set[str] = field(default_factory=set)

    @property
    def label(self) -> str:
        v = self.versions.get("vllm_ascend") or self.versions.get("vllm") or "?"
        sha = next((s[:8] for s in self.git_sha.values() if s), "")
        return f"{self.created[:16].replace('T', ' ')} {v}" + (f" {sha}" if sha else "")


@dataclass
class ChangePoint:
    cell: str
    pos: int
    index: int  # the first run after the change
    run_id: str
    before: float
    after: float
    delta: float
    ci: Interval | None
    pvalue: float
    units: tuple[int, int]
    changed: list[str]  # what differs in the fingerprint between run index-1 and run index

    @property
    def why(self) -> str:
        ci = "" if self.ci is None else f", 95 % CI [{100 * self.ci.low:+.1f}, {100 * self.ci.high:+.1f}]"
        what = "; ".join(self.changed) if self.changed else "nothing recorded in the fingerprint changed"
        return (
            f"pos{self.pos} {100 * self.before:.1f} % → {100 * self.after:.1f} % ({100 * self.delta:+.1f} pts{ci}); "
            f"permutation test over prompts p={self.pvalue:.3g} ({self.units[0]} vs {self.units[1]} prompt units); "
            f"changed at this run: {what}"
        )


@dataclass
class HistoryGroup:
    key: dict[str, Any]
    runs: list[RunPoint]
    k: int
    cells: list[str]
    change_points: list[ChangePoint] = field(default_factory=list)
    tolerance_pts: float = DEFAULT_TOLERANCE_PTS

    def k_of(self, cell: str) -> int:
        """A cell's positions: the group's k, or in a k sweep (issue 38) the cell's own, as its runs counted."""
        widths = [len(r.counts[cell][1]) for r in self.runs if cell in r.counts]
        return max(widths, default=self.k)

    def rate(self, cell: str, run_index: int, pos: int) -> float | None:
        pooled = self.runs[run_index].counts.get(cell)
        if pooled is None:
            return None
        drafts, accepted = pooled
        if drafts == 0 or pos >= len(accepted):
            return None
        return accepted[pos] / drafts

    @property
    def first(self) -> ChangePoint | None:
        return min(self.change_points, key=lambda cp: (cp.index, cp.cell, cp.pos), default=None)


@dataclass
class History:
    groups: list[HistoryGroup]
    skipped: list[str] = field(default_factory=list)  # runs that could not be read, with the reason


# --- gathering ----------------------------------------------------------------------------------------------


def find_runs(root: Path) -> list[Path]:
    if not root.is_dir():
        raise UserError(f"{root}: no such folder")
    found = sorted({p.parent for p in root.glob(f"*/{MANIFEST}")} | {p.parent for p in root.glob(f"*/*/{MANIFEST}")})
    if not found:
        raise UserError(f"{root}: no run folders (none has a {MANIFEST})")
    return found


def _units(ev: PromptCounts) -> tuple[np.ndarray, np.ndarray]:
    """Per-prompt (drafts, accepted[k]) from the evidence stage, folded into ≤ MAX_UNITS buckets."""
    codes = np.arange(ev.g) % MAX_UNITS
    n_units = min(ev.g, MAX_UNITS)
    drafts = np.bincount(codes, weights=ev.drafts.astype(np.float64), minlength=n_units)
    accepted = np.stack(
        [np.bincount(codes, weights=ev.per_pos[:, i].astype(np.float64), minlength=n_units) for i in range(ev.k)],
        axis=1,
    ).reshape(n_units, ev.k)
    return drafts.astype(np.int64), accepted.astype(np.int64)


def point(run: Run, evidence: Evidence | None = None) -> RunPoint:
    """The run's counts per cell as the evidence stage gives them (complete repeats, identical greedy repeats
    once): the numbers `show` prints. Summing every record counted a greedy run's identical repeats three
    times (4,041 drafts where `show` said 1,347) and pooled partial repeats into the rates. `evidence`: the
    run's, when the caller has collected it (the end of `run`)."""
    evidence = collect_evidence(run) if evidence is None else evidence
    counts: dict[str, tuple[int, list[int]]] = {}
    units: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    incomplete: set[str] = set()
    for cell in evidence.cells:
        if not cell.complete:
            incomplete.add(cell.cell)
        if cell.evidence.g:
            total = cell.evidence.total()
            counts[cell.cell] = (int(total.num_drafts), [int(x) for x in total.accepted_per_pos])
            units[cell.cell] = _units(cell.evidence)
    versions: dict[str, str] = {}
    shas: dict[str, str] = {}
    patches: dict[str, list[str]] = {}
    effective: dict[str, str | None] = {}
    for meta in evidence.meta:
        versions.update({n: str(v) for n, v in (meta.env.get("versions") or {}).items() if v})
        shas.update({n: str(v) for n, v in (meta.env.get("git_sha") or {}).items() if v})
        patches[meta.cell] = [f"{outcome.name} ({outcome.status})" for outcome in meta.outcomes]
        effective[meta.cell] = meta.cudagraph_mode
    return RunPoint(
        run_id=run.run_id,
        path=run.path,
        created=str(run.manifest.get("created") or ""),
        versions=versions,
        git_sha=shas,
        counts=counts,
        units=units,
        patches=patches,
        effective=effective,
        tool_version=run.manifest.get("tool_version"),
        status=str(run.manifest.get("status") or ""),
        incomplete=incomplete,
    )


def _what_changed(before: RunPoint, after: RunPoint, cell: str) -> list[str]:
    out: list[str] = []
    for name in sorted(set(before.versions) | set(after.versions)):
        if before.versions.get(name) != after.versions.get(name):
            out.append(f"{name} {before.versions.get(name)} → {after.versions.get(name)}")
    for name in sorted(set(before.git_sha) | set(after.git_sha)):
        if before.git_sha.get(name) != after.git_sha.get(name):
            out.append(f"{name} git {str(before.git_sha.get(name))[:10]} → {str(after.git_sha.get(name))[:10]}")
    if before.patches.get(cell) != after.patches.get(cell):
        out.append(
            f"patches [{', '.join(before.patches.get(cell) or []) or 'none'}] → "
            f"[{', '.join(after.patches.get(cell) or []) or 'none'}]"
        )
    if before.effective.get(cell) != after.effective.get(cell):
        out.append(f"effective cudagraph_mode {before.effective.get(cell)} → {after.effective.get(cell)}")
    if before.tool_version != after.tool_version:
        out.append(f"mtpbench {before.tool_version} → {after.tool_version}")
    return out


# --- change points ------------------------------------------------------------------------------------------


def _best_split(rates: np.ndarray, weights: np.ndarray) -> tuple[int, float]:
    """Split index t (segments [:t], [t:]) maximising the weighted between-segment sum of squares."""
    best_t, best = 0, -1.0
    total_w = weights.sum()
    mean = (rates * weights).sum() / total_w
    cum_weight = np.cumsum(weights)
    cum_sum = np.cumsum(rates * weights)
    for t in range(1, len(rates)):
        left_w, right_w = cum_weight[t - 1], total_w - cum_weight[t - 1]
        if left_w <= 0 or right_w <= 0:
            continue
        left_mean = cum_sum[t - 1] / left_w
        right_mean = (cum_sum[-1] - cum_sum[t - 1]) / right_w
        ss = left_w * (left_mean - mean) ** 2 + right_w * (right_mean - mean) ** 2
        if ss > best:
            best_t, best = t, ss
    return best_t, best


def _unit_stat(values: np.ndarray, bounds: np.ndarray) -> float:
    """max over the run boundaries of the between-segment sum of squares of the units, n_l·n_r/n·(m_l − m_r)²
    (the statistic the split search maximises; unweighted mean differences would favour tiny end segments)."""
    cum_sum = np.cumsum(values)
    n = len(values)
    left = cum_sum[bounds - 1] / bounds
    right = (cum_sum[-1] - cum_sum[bounds - 1]) / (n - bounds)
    return float((bounds * (n - bounds) / n * (left - right) ** 2).max())


def _permutation_p(unit_rates: list[np.ndarray], rng: np.random.Generator) -> float:
    sizes = np.array([len(u) for u in unit_rates])
    values = np.concatenate(unit_rates)
    bounds = np.cumsum(sizes)[:-1]
    bounds = bounds[(bounds > 0) & (bounds < len(values))]
    if len(bounds) == 0:
        return 1.0
    observed = _unit_stat(values, bounds)
    hits = sum(_unit_stat(rng.permutation(values), bounds) >= observed - 1e-12 for _ in range(PERMUTATIONS))
    return (hits + 1) / (PERMUTATIONS + 1)


def _segment(
    group: HistoryGroup,
    cell: str,
    pos: int,
    lo: int,
    hi: int,
    alpha: float,
    confidence: float,
    rng: np.random.Generator,
) -> list[ChangePoint]:
    idx = [
        n
        for n in range(lo, hi)
        if cell in group.runs[n].counts and group.runs[n].counts[cell][0] > 0 and cell not in group.runs[n].incomplete
    ]
    if len(idx) < 2:
        return []
    drafts = np.array([group.runs[n].counts[cell][0] for n in idx], dtype=np.float64)
    acc = np.array([group.runs[n].counts[cell][1][pos] for n in idx], dtype=np.float64)
    t, _ = _best_split(acc / drafts, drafts)
    if t == 0:
        return []
    accepted_before, drafts_before = int(acc[:t].sum()), int(drafts[:t].sum())
    accepted_after, drafts_after = int(acc[t:].sum()), int(drafts[t:].sum())
    before, after = accepted_before / drafts_before, accepted_after / drafts_after
    delta = after - before
    ci = diff_interval(accepted_after, drafts_after, accepted_before, drafts_before, before, confidence)
    out: list[ChangePoint] = []
    big = abs(delta) > group.tolerance_pts / 100 and ci is not None and (ci.low > 0 or ci.high < 0)
    if big:
        unit_rates = []
        for n in idx:
            unit_drafts, unit_accepted = group.runs[n].units[cell]
            keep = unit_drafts > 0
            unit_rates.append(unit_accepted[keep, pos] / unit_drafts[keep])
        pvalue = _permutation_p(unit_rates, rng)
        if pvalue < alpha:
            at = idx[t]
            out.append(
                ChangePoint(
                    cell=cell,
                    pos=pos,
                    index=at,
                    run_id=group.runs[at].run_id,
                    before=before,
                    after=after,
                    delta=delta,
                    ci=ci,
                    pvalue=pvalue,
                    units=(sum(len(u) for u in unit_rates[:t]), sum(len(u) for u in unit_rates[t:])),
                    changed=_what_changed(group.runs[idx[t - 1]], group.runs[at], cell),
                )
            )
            out += _segment(group, cell, pos, lo, at, alpha, confidence, rng)
            out += _segment(group, cell, pos, at, hi, alpha, confidence, rng)
    return out


def detect(group: HistoryGroup, confidence: float = 0.95, seed: int = 0) -> list[ChangePoint]:
    rng = np.random.default_rng(seed)  # fixed: the same runs always give the same verdict
    cps: list[ChangePoint] = []
    for cell in group.cells:
        for pos in range(group.k_of(cell)):
            cps += _segment(group, cell, pos, 0, len(group.runs), 1 - confidence, confidence, rng)
    return sorted(cps, key=lambda cp: (cp.index, cp.cell, cp.pos))


# --- the per-run cache ---------------------------------------------------------------------------------------

# A run's point (pooled counts per cell, ≤ MAX_UNITS prompt units, the fingerprint) is a few kB however many
# records the run has: cached beside the records, `history` over a year of nightly runs reads one small file
# per run instead of every record. Fresh only while manifest.json and records.jsonl have the size and
# modification time it was made from; bumped version = stale.
POINT_CACHE = "history-point.json"
# 2: counts from the evidence stage (1 summed identical repeats); 3: soak runs grouped; 4: the fingerprint
# holds speculative.extra (runs with other n-gram lookups are other groups).
POINT_CACHE_VERSION = 4


def _stamp(path: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for name in (MANIFEST, RECORDS):
        f = path / name
        st = f.stat() if f.is_file() else None
        out[name] = [st.st_size, st.st_mtime_ns] if st else []
    return out


def _point_to_json(pt: RunPoint, fp: dict[str, Any], gate: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": POINT_CACHE_VERSION,
        "fingerprint": fp,
        "gate": gate,
        "run_id": pt.run_id,
        "created": pt.created,
        "versions": pt.versions,
        "git_sha": pt.git_sha,
        "counts": {cell: [drafts, list(acc)] for cell, (drafts, acc) in pt.counts.items()},
        "units": {cell: [drafts.tolist(), acc.tolist()] for cell, (drafts, acc) in pt.units.items()},
        "patches": pt.patches,
        "effective": pt.effective,
        "tool_version": pt.tool_version,
        "status": pt.status,
        "incomplete": sorted(pt.incomplete),
    }


def _unit_matrix(values: list[int], units: int, k: int) -> np.ndarray:
    """A cell's cached per-unit positions: as many columns as it has (a k sweep's cells are narrower than k)."""
    flat = np.asarray(values, dtype=np.int64)
    return flat.reshape(units, flat.size // units if units else k)


def _point_from_json(path: Path, cached: dict[str, Any], k: int) -> RunPoint:
    return RunPoint(
        run_id=str(cached["run_id"]),
        path=path,
        created=str(cached["created"]),
        versions=dict(cached["versions"]),
        git_sha=dict(cached["git_sha"]),
        counts={cell: (int(v[0]), [int(x) for x in v[1]]) for cell, v in cached["counts"].items()},
        units={
            cell: (np.asarray(v[0], dtype=np.int64), _unit_matrix(v[1], len(v[0]), k))
            for cell, v in cached["units"].items()
        },
        patches={cell: list(v) for cell, v in cached["patches"].items()},
        effective=dict(cached["effective"]),
        tool_version=cached["tool_version"],
        status=str(cached["status"]),
        incomplete=set(cached["incomplete"]),
    )


def run_point(
    path: Path, run: Run | None = None, evidence: Evidence | None = None
) -> tuple[RunPoint, dict[str, Any], dict[str, Any]]:
    """(point, fingerprint, gate config) of one run folder, from its cache when fresh; else from the run
    (`run`, `evidence`: already loaded and collected by the caller), and the cache is (re)written, best
    effort (a read-only artifact folder still works)."""
    cache = path / POINT_CACHE
    stamp = _stamp(path)
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if cached.get("version") == POINT_CACHE_VERSION and cached.get("stamp") == stamp:
            k = k_width(cached["fingerprint"]["num_speculative_tokens"])
            return _point_from_json(path, cached, k), cached["fingerprint"], dict(cached["gate"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # no cache, or a damaged one: the run is the truth
    run = load_run(path) if run is None else run
    fp, pt = run_fingerprint(run), point(run, evidence)
    if run.typed.config.workload_kind == "soak":
        # One engine over many rounds: a group of its own, never mixed with fresh-process runs.
        fp = {**fp, "workload": "soak"}
    gate = dict(run.manifest["config"].get("gate") or {})  # as written: the cache keeps the config's own keys
    try:
        write_json_atomic(cache, {**_point_to_json(pt, fp, gate), "stamp": stamp})
    except (OSError, UserError):
        pass
    return pt, fp, gate


def k_width(value: Any) -> int:
    """A fingerprint's k as the width of its widest cell: the int, or a k sweep's largest (issue 38)."""
    return max(value) if isinstance(value, list) else int(value)


def refresh_point(path: Path, run: Run | None = None, evidence: Evidence | None = None) -> None:
    """Write a finished run's cache (called when a run ends, beside the columnar copy); never fails a run."""
    try:
        run_point(path, run, evidence)
    except (UserError, OSError, ValueError):
        pass


def build_history(paths: list[Path], tolerance_pts: float | None = None, confidence: float = 0.95) -> History:
    """Load every run (a run that cannot be read is listed, not fatal), group by comparability, detect."""
    groups: dict[str, HistoryGroup] = {}
    skipped: list[str] = []
    seen: set[Path] = set()
    for p in paths:
        folder = p if p.is_dir() or p.name not in (MANIFEST, RECORDS) else p.parent
        # The same run named twice (a folder and its manifest, or a glob and a path) is one run, not two.
        if folder.resolve() in seen:
            continue
        seen.add(folder.resolve())
        try:
            pt, fp, gate = run_point(folder)
        except UserError as exc:
            skipped.append(f"{p}: {exc}")
            continue
        key = json.dumps(fp, sort_keys=True, default=str)
        tol = tolerance_pts if tolerance_pts is not None else float(gate.get("tolerance_pts", DEFAULT_TOLERANCE_PTS))
        group = groups.setdefault(
            key, HistoryGroup(key=fp, runs=[], k=k_width(fp["num_speculative_tokens"]), cells=[], tolerance_pts=tol)
        )
        group.runs.append(pt)
    for group in groups.values():
        group.runs.sort(key=lambda r: (r.created, r.run_id))
        group.cells = list(dict.fromkeys(cell for r in group.runs for cell in r.counts))
        group.change_points = detect(group, confidence)
    if not groups:
        raise UserError("history: no readable runs" + (f" ({skipped[0]})" if skipped else ""))
    ordered = sorted(groups.values(), key=lambda g: (-len(g.runs), g.runs[0].created))
    return History(ordered, skipped)
