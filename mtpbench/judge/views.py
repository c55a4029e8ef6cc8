"""Pure data behind the report's pictures: per-prompt × position acceptance, per-repeat rates, changed text,
graph modes requested vs effective, and the fingerprint, from a run and its Comparison.

The numbers are the evidence stage's (evidence.py): per-prompt counts of the complete repeats, identical
greedy repeats once, so the heat map shows what `show` and `compare` judged. Nothing here draws or
prints; plots.py and htmlreport.py render.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mtpbench.judge.compare import Comparison
from mtpbench.judge.evidence import CellResult, cell_meta, changed_text
from mtpbench.judge.figdata import BuildsView, CellView, HeatmapGrid, RoundsView
from mtpbench.judge.findings import Kind
from mtpbench.judge.signals.builds import builds_table
from mtpbench.judge.signals.drift import drift_findings, round_stats
from mtpbench.store.results import Run


def value_text(x: Any) -> str:
    """An enum's value or a plain string (compare's verdicts and severities may be either)."""
    return str(getattr(x, "value", x))


def _reference_marks(comp: Comparison) -> dict[tuple[str, int], tuple[float | None, bool]]:
    """(cell, position) → (the rate the weights give, whether the engine is below it): the reference's pooled
    checks, for the cells no baseline check judged."""
    if comp.reference is None:
        return {}
    return {
        (a.cell, c.position): (c.reference, c.below)
        for a in comp.reference.cells
        for c in a.pooled()
        if c.position >= 0
    }


def cell_views(comp: Comparison) -> list[CellView]:
    checks = {(x.cell, x.pos): x for x in comp.checks}
    weights = _reference_marks(comp)
    failing: dict[str, list[str]] = {}
    for d in comp.diagnoses:
        if value_text(d.severity) == "fail":
            failing.setdefault(d.cell, []).append(d.name)
    out: list[CellView] = []
    for c in comp.cells:
        s = c.summary
        k = s.counts.k
        reps = [
            (
                f"r{r.repeat} seed {r.hash_seed}",
                [a / r.counts.num_drafts if r.counts.num_drafts else None for a in r.counts.accepted_per_pos],
            )
            for r in c.repeats
        ]
        judged = any((c.cell, i) in checks for i in range(k))
        held = not judged and any((c.cell, i) in weights for i in range(k))
        if held:  # no baseline judged the cell: the weights' rates and the engine-below-reference verdict
            baseline = [weights[(c.cell, i)][0] if (c.cell, i) in weights else None for i in range(k)]
            verdicts = ["regression" if weights.get((c.cell, i), (None, False))[1] else "" for i in range(k)]
            marks = "reference (weights)"
        else:
            baseline = [checks[(c.cell, i)].base_rate if (c.cell, i) in checks else None for i in range(k)]
            verdicts = [value_text(checks[(c.cell, i)].verdict) if (c.cell, i) in checks else "" for i in range(k)]
            marks = "baseline"
        out.append(
            CellView(
                cell=c.cell,
                mode_requested=c.requested.get("cudagraph_mode"),
                mode_effective=c.effective.get("cudagraph_mode"),
                rates=list(s.per_pos),
                ci=[None if ci is None else (ci.low, ci.high) for ci in s.per_pos_ci],
                baseline=baseline,
                verdicts=verdicts,
                repeats=reps,
                drafts=s.counts.num_drafts,
                patches=[f"{p.get('name')}: {p.get('status')}" for p in c.patches if isinstance(p, dict)],
                marks=marks,
                failed=list(dict.fromkeys(failing.get(c.cell, []))),
            )
        )
    return out


MAX_HEATMAP_ROWS = 40


@dataclass
class Heatmap:
    """Acceptance per (cell, row) and position, pooled over repeats: columns cell, row, drafts, prompts,
    changed (a prompt of the row changed text), pos0..pos{k-1} (fractions, NaN without drafts). A row is a
    prompt; with more prompts than fit (a serving run), a band of prompt lengths or of prompt order."""

    frame: pd.DataFrame
    rows: str  # "prompt" | "prompt tokens" | "prompt order"

    def grid(self, k: int) -> HeatmapGrid:
        """The frame as the figure's grid: rows and cells in the frame's order."""
        rates = self.frame
        cells = [str(c) for c in dict.fromkeys(rates["cell"])]
        rows = [str(r) for r in dict.fromkeys(rates["row"])]
        ci = pd.Index(cells).get_indexer(rates["cell"].astype(str))
        ri = pd.Index(rows).get_indexer(rates["row"].astype(str))
        grid = np.full((len(rows), len(cells) * k), np.nan)
        for i in range(k):
            grid[ri, ci * k + i] = 100 * rates[f"pos{i}"].to_numpy(dtype=np.float64)
        changed = np.zeros((len(rows), len(cells)), dtype=bool)
        changed[ri, ci] = rates["changed"].to_numpy(dtype=bool)
        return HeatmapGrid(cells, rows, self.rows, k, grid, changed)


def order_positions(ids: list[Any], prompts: np.ndarray) -> tuple[np.ndarray, int]:
    """Where each prompt stands in the configured order (-1: not in it), and how many distinct ids the order
    has; an id listed twice keeps its last place. One hash join: looked up one by one, 10⁵ prompts took
    0.17 s of every report."""
    at = pd.Series(np.arange(len(ids), dtype=np.int64), index=pd.Index(ids, dtype=object))
    at = at[~at.index.duplicated(keep="last")]
    found = at.reindex(pd.Index([str(p) for p in prompts], dtype=object))
    return found.fillna(-1).to_numpy(dtype=np.int64), len(at)


def _prompt_tokens(run: Run, prompts: np.ndarray) -> np.ndarray | None:
    """Prompt length per prompt id (the first record's), or None when a prompt has none recorded."""
    df = run.prompt_frame()
    if "num_prompt_tokens" not in df or not len(df):
        return None
    tokens = pd.to_numeric(df["num_prompt_tokens"], errors="coerce")
    first = tokens.groupby(df["prompt_id"].astype(str).to_numpy(), sort=False).first()
    out = first.reindex(pd.Index([str(p) for p in prompts], dtype=object))
    return None if out.isna().any() else out.to_numpy(dtype=np.float64)


def _rows_for(run: Run, prompts: np.ndarray, max_rows: int) -> tuple[np.ndarray, list[str], str]:
    """Row number of each prompt (an index into the labels), the row labels in display order, and what a row
    is. A row's label is computed from the same index that places the prompt in it: the heat map once sorted
    its labels into the configured order but left the rows in recorded order, so a batched run (recorded in
    completion order) put another prompt's name on 37 of 40 rows."""
    ids = run.manifest.get("prompts", {}).get("ids", [])
    pos, distinct = order_positions(ids, prompts)
    if len(prompts) <= max_rows:
        # The configured order; prompts outside it after, in the order they were recorded.
        rank = np.where(pos >= 0, pos, distinct + np.arange(len(prompts)))
        order = np.argsort(rank, kind="stable")
        row = np.empty(len(prompts), dtype=np.int64)
        row[order] = np.arange(len(prompts))
        return row, [str(prompts[i]) for i in order], "prompt"
    bands = min(10, max_rows)
    tokens = _prompt_tokens(run, prompts)
    if tokens is not None and len(np.unique(tokens)) > 1:
        codes, labels = token_bands(tokens, bands)
        return codes, labels, "prompt tokens"
    # Bands of the configured prompt order; the last ends at the last prompt, not at a multiple of the width.
    width = max(1, -(-max(distinct, 1) // bands))
    labels = [_span(b * width + 1, min((b + 1) * width, max(distinct, 1))) for b in range(bands)]
    return np.where(pos >= 0, pos // width, bands), [*labels, "not in the prompt set"], "prompt order"


def _span(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}–{high}"


def token_bands(tokens: np.ndarray, bands: int) -> tuple[np.ndarray, list[str]]:
    """Each prompt's band of prompt length (an index into the labels) and the labels, at most `bands` bands
    of about equal prompt counts. Prompt lengths are whole tokens, so a band is the whole numbers
    (edge_i, edge_i+1], labelled edge_i + 1 to edge_i+1: adjacent bands' labels are disjoint and contiguous
    (issue 30: labels made from qcut's fractional edges, rounded up on the left and down on the right, read
    "116–214" then "214–244" at a whole edge, and started below the shortest prompt)."""
    whole = np.floor(tokens).astype(np.int64)
    quantiles = np.quantile(whole, np.linspace(0.0, 1.0, bands + 1))
    # The first band opens just below the shortest prompt (its lower quantile, the minimum itself, would
    # give the shortest prompts a band of their own); the last edge is the longest prompt.
    edges = np.unique(np.concatenate([[whole.min() - 1], np.floor(quantiles[1:]).astype(np.int64)]))
    codes = np.searchsorted(edges, whole, side="left") - 1
    labels = [_span(int(low) + 1, int(high)) + " tokens" for low, high in itertools.pairwise(edges)]
    return codes.astype(np.int64), labels


def heatmap(
    run: Run,
    cells: list[CellResult],
    k: int,
    max_rows: int = MAX_HEATMAP_ROWS,
    changed: set[tuple[str, str]] | None = None,
) -> Heatmap:
    """Per (cell, row) the evidence stage's per-prompt counts summed (complete repeats, identical greedy
    repeats once: the numbers `show` and `compare` judge); `changed`: evidence.changed_text(cells)."""
    cols = [f"pos{i}" for i in range(k)]
    parts = []
    for c in cells:
        ev = c.evidence
        if not ev.g:
            continue
        part = pd.DataFrame({"cell": c.cell, "prompt": list(ev.ids), "drafts": ev.drafts.astype(np.int64)})
        for i in range(min(k, ev.k)):
            part[cols[i]] = ev.per_pos[:, i].astype(np.int64)
        parts.append(part)
    if not parts:
        return Heatmap(pd.DataFrame(columns=["cell", "row", "drafts", "prompts", "changed", *cols]), "prompt")
    long = pd.concat(parts, ignore_index=True).fillna({c: 0 for c in cols})
    prompts = np.asarray(list(dict.fromkeys(long["prompt"])), dtype=object)
    row_of, labels, kind = _rows_for(run, prompts, max_rows)
    code = pd.Index(prompts).get_indexer(long["prompt"])
    long["row"] = [labels[r] for r in row_of[code]]
    marks = changed_text(cells) if changed is None else changed
    long["changed"] = [(c, p) in marks for c, p in zip(long["cell"], long["prompt"], strict=True)]
    g = (
        long.groupby(["cell", "row"], sort=False)
        .agg(
            drafts=("drafts", "sum"),
            prompts=("prompt", "nunique"),
            changed=("changed", "any"),
            **{c: (c, "sum") for c in cols},
        )
        .reset_index()
    )
    d = g["drafts"].to_numpy(dtype=np.float64)
    for c in cols:
        g[c] = np.divide(g[c].to_numpy(dtype=np.float64), d, out=np.full(len(g), np.nan), where=d > 0)
    cell_order = {c.cell: n for n, c in enumerate(cells)}
    row_order = {r: n for n, r in enumerate(labels)}
    g["_c"] = g["cell"].map(cell_order)
    g["_r"] = g["row"].map(row_order)
    g = g.sort_values(["_c", "_r"], kind="stable").drop(columns=["_c", "_r"]).reset_index(drop=True)
    return Heatmap(g[["cell", "row", "drafts", "prompts", "changed", *cols]], kind)


def fingerprint(run: Run, cells: list[CellResult]) -> list[dict[str, Any]]:
    """One row per cell-repeat: the versions, device and modes its worker recorded at engine start (the
    evidence stage's typed cell metadata)."""
    rows: list[dict[str, Any]] = []
    for m in cell_meta(run.cell_starts()):
        rows.append(
            {
                "cell": m.cell,
                "repeat": m.repeat,
                "PYTHONHASHSEED": m.hash_seed,
                "requested": m.requested,
                "effective": m.effective,
                "patches": m.patches,
                "engine_start_s": m.engine_start_s,
                **({"env": m.env} if m.env else {}),
            }
        )
    if not rows:
        rows = [{"cell": c.cell, "requested": c.requested, "effective": c.effective} for c in cells]
    return rows


def rounds_view(comp: Comparison) -> RoundsView | None:
    """The soak figure's data (judge/signals/drift.py's round_stats); None when no cell of the run is a soak cell."""
    cells = [(c, round_stats(c)) for c in comp.cells]
    cells = [(c, st) for c, st in cells if st]
    if not cells:
        return None
    # Drawn before the diagnoses exist (`report`'s painter step, judge/compare.judge): the drift
    # judgement is asked here, as is.
    alpha = comp.gate.false_alarm / len(cells)
    first = {
        c.cell: getattr(d.payload, "first_round", None)
        for c, _ in cells
        for d in drift_findings(c, comp.gate, comp.greedy, alpha)
        if d.kind == Kind.DRIFT
    }
    k = max(len(st[0].per_pos) for _, st in cells)
    return RoundsView(
        cells=[c.cell for c, _ in cells],
        rounds=[[r.round for r in st] for _, st in cells],
        per_pos=[[[r.per_pos[i] / r.drafts if r.drafts else None for r in st] for i in range(k)] for _, st in cells],
        mean=[[r.mean for r in st] for _, st in cells],
        stalled=[[r.round for r in st if r.stalled] for _, st in cells],
        drift_round=[first.get(c.cell) for c, _ in cells],
    )


def builds_view(run: Run, comp: Comparison) -> BuildsView | None:
    """The builds × positions view (judge/signals/builds.py's builds_table, which the Comparison carries); None for a
    run of one build. Drawn before the diagnoses exist (the painter step), every cell reads unflagged."""
    return comp.builds if comp.builds is not None else builds_table(run.typed.config, comp.cells, comp.diagnoses)
