"""Pure data behind the report's pictures: per-prompt × position acceptance, per-repeat rates, changed text,
graph modes requested vs effective, and the fingerprint, from a run and its Comparison.

Everything is vectorised over the prompt frame (columnar.py), so a run of 10⁶ prompt records costs a few
group-bys, not a Python loop per record. Nothing here draws or prints; plots.py and htmlreport.py render.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mtpbench.columnar import positions
from mtpbench.compare import CellResult, Comparison
from mtpbench.results import Run


def _value(x: Any) -> str:
    """An enum's value or a plain string (compare's verdicts and severities may be either)."""
    return str(getattr(x, "value", x))


@dataclass
class CellView:
    """What one cell's bar panel shows; rates are fractions, None where there were no drafts."""

    cell: str
    mode_requested: str | None
    mode_effective: str | None
    rates: list[float | None]
    ci: list[tuple[float, float] | None]
    baseline: list[float | None]
    verdicts: list[str]
    repeats: list[tuple[str, list[float | None]]]  # (label, per-position rates) per repeat
    drafts: int
    patches: list[str] = field(default_factory=list)


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


def _rows_for(df: pd.DataFrame, run: Run, max_rows: int) -> tuple[pd.Series, str]:
    prompts = df["prompt_id"].astype(object)
    n = prompts.nunique()
    if n <= max_rows:
        return prompts, "prompt"
    bands = min(10, max_rows)
    tokens = pd.to_numeric(df["num_prompt_tokens"], errors="coerce") if "num_prompt_tokens" in df else None
    if tokens is not None and tokens.notna().all() and tokens.nunique() > 1:
        cut = pd.qcut(tokens, q=bands, duplicates="drop")
        labels = cut.map(lambda iv: f"{int(np.ceil(iv.left))}–{int(iv.right)} tokens").astype(object)
        return labels, "prompt tokens"
    order = {p: i for i, p in enumerate(run.manifest.get("prompts", {}).get("ids", []))}
    idx = prompts.map(order).fillna(-1).astype(np.int64)
    width = max(1, -(-max(len(order), 1) // bands))
    lo = (idx // width) * width
    return (lo + 1).astype(str) + "–" + (lo + width).astype(str), "prompt order"


def heatmap(run: Run, k: int, max_rows: int = MAX_HEATMAP_ROWS) -> Heatmap:
    df = run.prompt_frame()
    cols = [f"pos{i}" for i in range(k)]
    if not len(df):
        return Heatmap(pd.DataFrame(columns=["cell", "row", "drafts", "prompts", "changed", *cols]), "prompt")
    rows, kind = _rows_for(df, run, max_rows)
    acc = positions(df, k)
    sums = pd.DataFrame(acc, columns=cols)
    sums["drafts"] = df["num_drafts"].to_numpy(dtype=np.int64)
    sums["cell"] = df["cell"].astype(object).to_numpy()
    sums["row"] = rows.to_numpy()
    sums["prompt_id"] = df["prompt_id"].astype(object).to_numpy()
    changed = changed_text(run)
    if changed:
        keys = pd.MultiIndex.from_arrays([sums["cell"], sums["prompt_id"]])
        sums["changed"] = keys.isin(list(changed))
    else:
        sums["changed"] = False
    g = sums.groupby(["cell", "row"], sort=False).agg(
        **{c: (c, "sum") for c in cols}, drafts=("drafts", "sum"), prompts=("prompt_id", "nunique"),
        changed=("changed", "any"),
    ).reset_index()  # fmt: skip
    d = g["drafts"].to_numpy(dtype=np.float64)
    for c in cols:
        g[c] = np.divide(g[c].to_numpy(dtype=np.float64), d, out=np.full(len(g), np.nan), where=d > 0)
    cell_order = {c["cell"]: n for n, c in enumerate(run.manifest.get("cells", []))}
    if kind == "prompt":
        row_order = {p: n for n, p in enumerate(run.manifest.get("prompts", {}).get("ids", []))}
    else:  # bands sort by their lower bound
        row_order = {r: int(str(r).split("–")[0]) for r in g["row"].unique()}
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
    small = pd.DataFrame({c: df[c].astype(object).to_numpy() for c in ("build", "cell", "prompt_id", "output_sha256")})
    keys = ["build", "prompt_id", "output_sha256"]
    n = small.groupby(keys, sort=False, dropna=False).size().rename("n").reset_index()
    common = (
        n.sort_values("n", ascending=False, kind="stable")
        .drop_duplicates(["build", "prompt_id"])
        .rename(columns={"output_sha256": "common"})[["build", "prompt_id", "common"]]
    )
    joined = small.merge(common, on=["build", "prompt_id"], how="left")
    differs = joined.loc[joined["output_sha256"] != joined["common"], ["cell", "prompt_id"]].drop_duplicates()
    return {(str(c), str(p)) for c, p in zip(differs["cell"], differs["prompt_id"], strict=True)}


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
