"""Pure data behind the report's pictures: per-prompt × position acceptance, per-repeat rates, changed text,
graph modes requested vs effective, and the fingerprint, from a run and its Comparison.

Everything is vectorised over the prompt frame (columnar.py), so a run of 10⁶ prompt records costs a few
group-bys, not a Python loop per record. Nothing here draws or prints; plots.py and htmlreport.py render.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mtpbench.columnar import positions
from mtpbench.compare import CellResult, Comparison
from mtpbench.figdata import CellView, HeatmapGrid
from mtpbench.results import Run


def _value(x: Any) -> str:
    """An enum's value or a plain string (compare's verdicts and severities may be either)."""
    return str(getattr(x, "value", x))


def cell_views(comp: Comparison) -> list[CellView]:
    checks = {(x.cell, x.pos): x for x in comp.checks}
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
        out.append(
            CellView(
                cell=c.cell,
                mode_requested=c.requested.get("cudagraph_mode"),
                mode_effective=c.effective.get("cudagraph_mode"),
                rates=list(s.per_pos),
                ci=[None if ci is None else (ci.low, ci.high) for ci in s.per_pos_ci],
                baseline=[checks[(c.cell, i)].base_rate if (c.cell, i) in checks else None for i in range(k)],
                verdicts=[_value(checks[(c.cell, i)].verdict) if (c.cell, i) in checks else "" for i in range(k)],
                repeats=reps,
                drafts=s.counts.num_drafts,
                patches=[f"{p.get('name')}: {p.get('status')}" for p in c.patches if isinstance(p, dict)],
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


def _codes(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and their labels (free for the columnar copy's categoricals)."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def order_positions(ids: list[Any], prompts: np.ndarray) -> tuple[np.ndarray, int]:
    """Where each prompt stands in the configured order (-1: not in it), and how many distinct ids the order
    has; an id listed twice keeps its last place. The rule of `{p: n for n, p in enumerate(ids)}` looked up
    with `str(p)`, as one hash join: looked up one by one, 10⁵ prompts took 0.17 s of every report."""
    at = pd.Series(np.arange(len(ids), dtype=np.int64), index=pd.Index(ids, dtype=object))
    at = at[~at.index.duplicated(keep="last")]
    found = at.reindex(pd.Index([str(p) for p in prompts], dtype=object))
    return found.fillna(-1).to_numpy(dtype=np.int64), len(at)


def _rows_for(df: pd.DataFrame, run: Run, max_rows: int, prompt_codes: np.ndarray,
              prompts: np.ndarray) -> tuple[np.ndarray, list[str], str]:  # fmt: skip
    """Row code per record, the row labels in display order, and what a row is."""
    ids = run.manifest.get("prompts", {}).get("ids", [])
    if len(prompts) <= max_rows:
        # The configured order; prompts outside it after, in the order they were recorded.
        pos, distinct = order_positions(ids, prompts)
        rank = np.where(pos >= 0, pos, distinct + np.arange(len(prompts)))
        return prompt_codes, [str(prompts[i]) for i in np.argsort(rank, kind="stable")], "prompt"
    bands = min(10, max_rows)
    tokens = pd.to_numeric(df["num_prompt_tokens"], errors="coerce") if "num_prompt_tokens" in df else None
    if tokens is not None and tokens.notna().all() and tokens.nunique() > 1:
        cut = pd.qcut(tokens, q=bands, duplicates="drop")
        cats = cut.cat.categories
        labels = [f"{int(np.ceil(iv.left))}–{int(iv.right)} tokens" for iv in cats]
        return cut.cat.codes.to_numpy(dtype=np.int64), labels, "prompt tokens"
    # Bands of the configured prompt order, computed per distinct prompt and then spread to the records.
    pos, distinct = order_positions(ids, prompts)
    width = max(1, -(-max(distinct, 1) // bands))
    band_of_prompt = np.where(pos >= 0, pos // width, bands)
    labels = [f"{b * width + 1}–{(b + 1) * width}" for b in range(bands)] + ["not in the prompt set"]
    return band_of_prompt[prompt_codes], labels, "prompt order"


def heatmap(run: Run, k: int, max_rows: int = MAX_HEATMAP_ROWS,
            changed: set[tuple[str, str]] | None = None) -> Heatmap:  # fmt: skip
    """`changed`: changed_text(run), when the caller already has it."""
    df = run.prompt_frame()
    cols = [f"pos{i}" for i in range(k)]
    if not len(df):
        return Heatmap(pd.DataFrame(columns=["cell", "row", "drafts", "prompts", "changed", *cols]), "prompt")
    cell_c, cells = _codes(df["cell"])
    prompt_c, prompts = _codes(df["prompt_id"])
    row_c, row_labels, kind = _rows_for(df, run, max_rows, prompt_c, prompts)
    n_rows = max(len(row_labels), int(row_c.max()) + 1)
    key = cell_c * n_rows + row_c
    changed = changed_text(run) if changed is None else changed
    flag = np.zeros(len(df), dtype=bool)
    if changed:
        cell_idx = {str(c): n for n, c in enumerate(cells)}
        prompt_idx = {str(p): n for n, p in enumerate(prompts)}
        bad = {cell_idx[c] * len(prompts) + prompt_idx[p] for c, p in changed if c in cell_idx and p in prompt_idx}
        flag = np.isin(cell_c * len(prompts) + prompt_c, list(bad))
    # Sums per (cell, row) with bincount over the dense key (a pandas group-by with named aggregations took
    # half a second over 10⁶ records); the groups keep their order of first appearance.
    keys, first = np.unique(key, return_index=True)
    keys = keys[np.argsort(first, kind="stable")]
    slot = np.full(int(key.max()) + 1, -1, dtype=np.int64)
    slot[keys] = np.arange(len(keys))
    at = slot[key]
    acc = positions(df, k)
    g = pd.DataFrame({c: np.bincount(at, weights=acc[:, i], minlength=len(keys)).astype(np.int64)
                      for i, c in enumerate(cols)})  # fmt: skip
    g["drafts"] = np.bincount(at, weights=df["num_drafts"].to_numpy(dtype=np.float64), minlength=len(keys)).astype(
        np.int64
    )
    g["changed"] = np.bincount(at, weights=flag, minlength=len(keys)) > 0
    distinct = np.unique(at * (len(prompts) + 1) + prompt_c) // (len(prompts) + 1)
    g["prompts"] = np.bincount(distinct, minlength=len(keys))
    g.insert(0, "row", [row_labels[r] if r < len(row_labels) else str(r) for r in keys % n_rows])
    g.insert(0, "cell", [str(cells[c]) for c in keys // n_rows])
    d = g["drafts"].to_numpy(dtype=np.float64)
    for c in cols:
        g[c] = np.divide(g[c].to_numpy(dtype=np.float64), d, out=np.full(len(g), np.nan), where=d > 0)
    cell_order = {c["cell"]: n for n, c in enumerate(run.manifest.get("cells", []))}
    row_order = {r: n for n, r in enumerate(row_labels)}
    g["_c"] = g["cell"].map(cell_order).fillna(len(cell_order))
    g["_r"] = g["row"].map(row_order).fillna(len(row_order))
    g = g.sort_values(["_c", "_r"], kind="stable").drop(columns=["_c", "_r"]).reset_index(drop=True)
    return Heatmap(g, kind)


def changed_text(run: Run) -> set[tuple[str, str]]:
    """(cell, prompt) pairs whose greedy output differs from the build's most common output for that prompt,
    or differs between the cell's own repeats: the target verifies every token, so under greedy decoding the
    text must be the same everywhere in a build."""
    df = run.prompt_frame()
    if not len(df):
        return set()
    build_c, _ = _codes(df["build"])
    cell_c, cells = _codes(df["cell"])
    prompt_c, prompts = _codes(df["prompt_id"])
    sha_c, _ = _codes(df["output_sha256"])
    # All integer work (10⁶ records: a group-by + merge took a second): (build, prompt) and (build, prompt,
    # output) as dense codes in order of first appearance; the most common output per (build, prompt), ties
    # to the output seen first; then the records whose output is not it.
    bp, _ = pd.factorize(build_c * len(prompts) + prompt_c)
    bps, _ = pd.factorize(bp * (int(sha_c.max()) + 1) + sha_c)
    n = np.bincount(bps)
    bp_of = bp[np.unique(bps, return_index=True)[1]]  # the (build, prompt) of every distinct output
    order = np.lexsort((np.arange(len(n)), -n, bp_of))  # per (build, prompt): most common first, then first seen
    best = np.full(int(bp.max()) + 1, -1, dtype=np.int64)
    first_of_group = np.r_[True, bp_of[order][1:] != bp_of[order][:-1]]
    best[bp_of[order][first_of_group]] = order[first_of_group]
    differs = bps != best[bp]
    pairs = np.unique(cell_c[differs] * len(prompts) + prompt_c[differs])
    return {(str(cells[x // len(prompts)]), str(prompts[x % len(prompts)])) for x in pairs.tolist()}


def fingerprint(run: Run, cells: list[CellResult]) -> list[dict[str, Any]]:
    """One row per cell-repeat: the versions, device and modes its worker recorded at engine start."""
    rows: list[dict[str, Any]] = []
    for s in run.cell_starts():
        env = s.get("env") or {}
        rows.append(
            {
                "cell": s.get("cell"),
                "repeat": s.get("repeat"),
                "PYTHONHASHSEED": s.get("hash_seed"),
                "requested": s.get("requested"),
                "effective": s.get("effective"),
                "patches": s.get("patches"),
                "engine_start_s": s.get("engine_start_s"),
                **({"env": env} if env else {}),
            }
        )
    if not rows:
        rows = [{"cell": c.cell, "requested": c.requested, "effective": c.effective} for c in cells]
    return rows
