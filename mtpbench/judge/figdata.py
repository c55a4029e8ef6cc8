"""The report figures' data in plain Python and numpy: what views.py computes and plots.py draws, and what
crosses to the painter process (painter.py). Nothing here imports pandas or the analysis, so the painter
starts drawing a second after it is spawned instead of three."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


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
    # What the black bars mark: the baseline's rates, or (a run without a baseline held against its weights,
    # `mtpbench reference`) the rates the weights give.
    marks: str = "baseline"
    failed: list[str] = field(default_factory=list)  # the cell's failing findings (kinds), said in its title


@dataclass(frozen=True)
class HeatmapGrid:
    """The heat map as drawn: `grid[row, cell * k + pos]` acceptance % (NaN: no drafts), `changed[row, cell]`
    a prompt of the row changed its text; `rows_kind` says what a row is (views.Heatmap.rows)."""

    cells: list[str]
    rows: list[str]
    rows_kind: str
    k: int
    grid: np.ndarray
    changed: np.ndarray


@dataclass(frozen=True)
class RoundsView:
    """The soak figure: per cell, acceptance per round (fractions, None without drafts) for each position and
    the mean; the rounds that stalled, and the first round that drifted (None: none)."""

    cells: list[str]
    rounds: list[list[int]]
    per_pos: list[list[list[float | None]]]  # [cell][pos][round index]
    mean: list[list[float | None]]
    stalled: list[list[int]]
    drift_round: list[int | None]


@dataclass(frozen=True)
class BuildsView:
    """Builds side by side (a run of more than one build): per mode/variant group and build, acceptance per
    position (fractions, None: no drafts or no such cell), its gap to the reference build's same position
    (pooled rates; the finding's Δ is the paired one), the pooled AL, and the build-divergence finding's
    severity for that cell ("" none; "inconclusive" for an unsupported drop)."""

    reference_build: str
    builds: list[str]
    groups: list[str]  # "mode/variant"
    k: int
    rates: list[list[list[float | None]]]  # [group][build][pos]
    deltas: list[list[list[float | None]]]  # [group][build][pos], None for the reference build itself
    al: list[list[float | None]]  # [group][build]
    flagged: list[list[str]]  # [group][build]
