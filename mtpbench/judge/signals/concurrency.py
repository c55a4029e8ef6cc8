"""A serving run's concurrency sweep (`workload.concurrency: [1, 4, 16]`, engine/serving.py) as the judge sees it:
each cell's requests split by the level they ran at (`level_cells`: one CellResult per level, the requests of
its complete repeats paired by the prompt each was sent, as the mode pairs are), and every level after the
first held against the first (`level_pairs`). diagnoses.py judges each pair by the divergence rule the modes
use and names it as a mode-divergence of `concurrency=1 → 16`; plan.py counts the pairs' checks in the run's
false-alarm family (`sweep_checks`). A single-int concurrency is no sweep: nothing here applies. Nothing here
prints.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from mtpbench.judge.evidence import COUNT_COLS, CellResult, pos_cols
from mtpbench.judge.findings.features import FeatureChange
from mtpbench.judge.stats import PromptCounts, summarize
from mtpbench.store.results import Run

CONCURRENCY = "concurrency"  # the feature a level pair names, as the workload and the records spell it


def sweep_levels(run: Run) -> list[int]:
    """The concurrency levels of a serving sweep in the order they ran (the first is the reference); empty for
    an offline run or a single level."""
    wl = dict(run.typed.config.workload or {})
    value = wl.get(CONCURRENCY)
    if wl.get("kind") != "serving" or not isinstance(value, list) or len(value) < 2:
        return []
    return [int(c) for c in value]


def _level_evidence(rows: list[dict[str, Any]], k: int) -> tuple[PromptCounts, pd.DataFrame]:
    """Per-prompt totals of one level's requests (every request of a prompt is one cluster, as a prompt's
    repeats are offline) and the observations `_same_outputs` reads (prompt, sha)."""
    if not rows:
        return PromptCounts.empty(k), pd.DataFrame({"prompt": [], "sha": []})
    df = pd.DataFrame(
        {
            # the pooled counters-only record has no base prompt: it is its own one cluster
            "prompt": [str(r.get("base_prompt_id") or r.get("prompt_id")) for r in rows],
            "sha": [str(r.get("output_sha256")) for r in rows],
            **{c: [int(r.get(c) or 0) for r in rows] for c in COUNT_COLS},
        }
    )
    per_pos = np.array([(list(r.get("accepted_per_pos") or []) + [0] * k)[:k] for r in rows], dtype=np.int64)
    for i, col in enumerate(pos_cols(k)):
        df[col] = per_pos[:, i]
    tot = df.groupby("prompt", sort=False)[[*COUNT_COLS, *pos_cols(k)]].sum()
    counts = PromptCounts(
        ids=tuple(map(str, tot.index.tolist())),
        drafts=tot["num_drafts"].to_numpy(),
        draft_tokens=tot["num_draft_tokens"].to_numpy(),
        accepted=tot["num_accepted_tokens"].to_numpy(),
        per_pos=tot[pos_cols(k)].to_numpy(),
    )
    return counts, df[["prompt", "sha"]]


def level_cells(run: Run, cell: CellResult, confidence: float = 0.95) -> dict[int, CellResult]:
    """The cell's evidence per sweep level, from its complete repeats' records (the cell's own evidence pools
    every level). Each is the cell under its own name, its mode told as `<mode> at concurrency <level>`."""
    levels = sweep_levels(run)
    if not levels:
        return {}
    k = run.typed.k
    complete = {r.repeat for r in cell.repeats if r.complete}
    mine = [
        r
        for r in run.records
        if r.get("type") == "prompt" and r.get("cell") == cell.cell and r.get("repeat") in complete
    ]
    out: dict[int, CellResult] = {}
    for level in levels:
        rows = [r for r in mine if r.get(CONCURRENCY) == level]
        evidence, obs = _level_evidence(rows, k)
        out[level] = dataclasses.replace(
            cell,
            mode=f"{cell.mode} at concurrency {level}",
            summary=summarize(evidence, confidence),
            evidence=evidence,
            observations=obs,
        )
    return out


def level_pairs(
    run: Run, cells: list[CellResult], confidence: float = 0.95
) -> list[tuple[CellResult, CellResult, FeatureChange]]:
    """(a level's cell, the first level's cell, the change) for every level after the first of every cell."""
    levels = sweep_levels(run)
    out: list[tuple[CellResult, CellResult, FeatureChange]] = []
    for cell in cells:
        by_level = level_cells(run, cell, confidence)
        ref = by_level.get(levels[0]) if levels else None
        if ref is None or not ref.evidence.g:
            continue
        for level in levels[1:]:
            out.append((by_level[level], ref, FeatureChange(name=CONCURRENCY, reference=levels[0], mode=level)))
    return out


def sweep_checks(run: Run, cells: int) -> int:
    """The false-alarm family's share of a sweep: k positions per level after the first, per cell."""
    levels = sweep_levels(run)
    return run.typed.k * max(len(levels) - 1, 0) * cells
