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


def prompt_position_rates(run: Run, k: int) -> pd.DataFrame:
    """Acceptance per (cell, prompt) and position, pooled over repeats: columns pos0..pos{k-1} (fractions,
    NaN without drafts) and drafts; rows in the run's cell order, prompts in their configured order."""
    df = run.prompt_frame()
    if not len(df):
        return pd.DataFrame(columns=["cell", "prompt_id", "drafts", *[f"pos{i}" for i in range(k)]])
    acc = positions(df, k)
    sums = pd.DataFrame(acc, columns=[f"pos{i}" for i in range(k)])
    sums["drafts"] = df["num_drafts"].to_numpy(dtype=np.int64)
    sums["cell"] = df["cell"].to_numpy()
    sums["prompt_id"] = df["prompt_id"].to_numpy()
    g = sums.groupby(["cell", "prompt_id"], sort=False).sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(k):
            g[f"pos{i}"] = np.where(g["drafts"] > 0, g[f"pos{i}"] / g["drafts"].where(g["drafts"] > 0, 1), np.nan)
    g = g.reset_index()
    cell_order = {c["cell"]: n for n, c in enumerate(run.manifest.get("cells", []))}
    prompt_order = {p: n for n, p in enumerate(run.manifest.get("prompts", {}).get("ids", []))}
    g["_c"] = g["cell"].map(cell_order).fillna(len(cell_order))
    g["_p"] = g["prompt_id"].map(prompt_order).fillna(len(prompt_order))
    return g.sort_values(["_c", "_p"]).drop(columns=["_c", "_p"]).reset_index(drop=True)


def changed_text(run: Run) -> set[tuple[str, str]]:
    """(cell, prompt) pairs whose greedy output differs from the build's most common output for that prompt,
    or differs between the cell's own repeats: the target verifies every token, so under greedy decoding the
    text must be the same everywhere in a build."""
    df = run.prompt_frame()
    if not len(df):
        return set()
    small = df[["build", "cell", "prompt_id", "output_sha256"]]
    common = (
        small.groupby(["build", "prompt_id"], sort=False)["output_sha256"]
        .agg(lambda s: s.value_counts().index[0])
        .rename("common")
    )
    joined = small.join(common, on=["build", "prompt_id"])
    differs = joined[joined["output_sha256"] != joined["common"]]
    per_cell = small.groupby(["cell", "prompt_id"], sort=False)["output_sha256"].nunique()
    out = {(str(c), str(p)) for c, p in zip(differs["cell"], differs["prompt_id"], strict=True)}
    out |= {(str(c), str(p)) for (c, p), n in per_cell.items() if n > 1}
    return out


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
