"""The report's figures, drawn with matplotlib (the `plot` extra): per-position acceptance per cell (bars,
interval whiskers, the baseline marked, one dot per repeat), the prompt × position heat map, and the trend
of a history. Each function takes the pure data of views.py / history.py and returns a Figure; `svg` and
`save_png` turn it into what the HTML report embeds or a PR comment shows. matplotlib is imported only
here and only when a figure is asked for, so the core CLI runs without it.
"""

from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtpbench.errors import UserError
from mtpbench.render.words.htmlpage import heatmap_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    from mtpbench.judge.figdata import BuildsView, CellView, HeatmapGrid, RoundsView
    from mtpbench.judge.findings.context import ContextTable
    from mtpbench.judge.history import HistoryGroup

INSTALL_HINT = "the plots need matplotlib: pip install 'mtpbench[plot]' (or: pip install matplotlib)"
VERDICT_COLOR = {"regression": "#c62828", "improvement": "#1565c0", "pass": "#2e7d32"}
BAR_COLOR = "#90a4ae"
# A title is wrapped to this share of its room (a little air at the figure's edge), never below this many
# characters a line.
TITLE_MARGIN = 0.96
MIN_TITLE_CHARS = 12
# Layouts redone after a title wrapped: the second settles every figure drawn here; the third is a margin.
LAYOUT_ROUNDS = 3


def check_installed() -> None:
    """The install hint (exit 2) at once when matplotlib is missing, without importing it."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UserError(INSTALL_HINT)


def require() -> Any:
    """matplotlib with a headless backend, or a UserError (exit 2) saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.titlesize": 9})
    return plt


def _pct(x: float | None) -> float:
    return math.nan if x is None else 100 * x


def fit_titles(fig: Figure, suptitle: Text | None = None) -> bool:
    """Wrap the figure's title (`suptitle`, centred on the figure) and each panel's title (centred on its
    panel) onto more lines until it lies within the figure and clear of the neighbouring columns' panels: a
    title wider than that was cut at the PNG's edge (issue 30: "run <id> vs <baseline path>" over a one-cell
    figure, the heat map's band title over one cell). Measuring a text needs no full draw. True when a title
    was wrapped."""
    renderer = fig.canvas.get_renderer()
    full = fig.bbox.width
    titles: list[tuple[Text, float]] = [] if suptitle is None else [(suptitle, full)]
    for ax in fig.axes:
        if not ax.title.get_text():
            continue
        left, right = _column_bounds(ax, full)
        box = ax.get_window_extent(renderer)
        centre = (box.x0 + box.x1) / 2
        titles.append((ax.title, 2 * min(centre - left, right - centre)))
    wrapped = False
    for text, room in titles:
        wrapped = _wrap_to(text, TITLE_MARGIN * room, renderer) or wrapped
    return wrapped


def _column_bounds(ax: Any, full: float) -> tuple[float, float]:
    """The pixels a panel's title may span: from the right edge of the column to its left (or the figure's
    edge) to the left edge of the column to its right (a colorbar's, a neighbouring panel's)."""
    spec = ax.get_subplotspec()
    if spec is None:
        return 0.0, full
    grid = spec.get_gridspec()
    _bottoms, _tops, lefts, rights = grid.get_grid_positions(ax.figure)
    first, last = spec.colspan.start, spec.colspan.stop - 1
    left = rights[first - 1] * full if first > 0 else 0.0
    right = lefts[last + 1] * full if last + 1 < grid.ncols else full
    return float(left), float(right)


def _wrap_to(text: Text, room: float, renderer: Any) -> bool:
    original = text.get_text()
    width = text.get_window_extent(renderer).width
    if not original or width <= room:
        return False
    chars = max(len(line) for line in original.splitlines())
    while width > room and chars > MIN_TITLE_CHARS:
        # Characters in proportion to the room, then at least one fewer each round until it fits.
        chars = max(min(chars - 1, int(chars * room / width)), MIN_TITLE_CHARS)
        text.set_text("\n".join(textwrap.fill(line, chars, break_on_hyphens=False) for line in original.splitlines()))
        width = text.get_window_extent(renderer).width
    return True


def _layout(fig: Figure, suptitle: Text | None = None) -> None:
    """tight_layout, then the titles fitted to where the panels ended up; a wrapped title has more lines,
    so the layout is redone (and the titles measured again: the panels moved) until none wraps further."""
    fig.tight_layout()
    for _ in range(LAYOUT_ROUNDS):
        if not fit_titles(fig, suptitle):
            return
        fig.tight_layout()


def acceptance_figure(views: list[CellView], title: str = "") -> Figure:
    """One panel per cell: bars = pooled per-position acceptance (red where it failed), whiskers = its 95 %
    interval, black bar = the baseline (or, for a run held against its weights, the rates the weights give),
    dots = the repeats (fresh processes; a spread of dots is cross-process instability); a failing cell's
    title names its failing findings."""
    plt = require()
    n = max(len(views), 1)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 3.0 * nrows), squeeze=False, sharey=True)
    for ax in axes.flat[len(views) :]:
        ax.set_visible(False)
    for ax, v in zip(axes.flat, views, strict=False):
        k = len(v.rates)
        xs = list(range(k))
        heights = [_pct(r) for r in v.rates]
        colors = [
            VERDICT_COLOR.get(vd, BAR_COLOR) if vd in ("regression", "improvement") else BAR_COLOR for vd in v.verdicts
        ]
        ax.bar(xs, [0 if math.isnan(h) else h for h in heights], color=colors, width=0.6, zorder=1)
        lo = [h - _pct(c[0]) if c else 0 for h, c in zip(heights, v.ci, strict=True)]
        hi = [_pct(c[1]) - h if c else 0 for h, c in zip(heights, v.ci, strict=True)]
        ax.errorbar(xs, heights, yerr=[lo, hi], fmt="none", ecolor="#263238", capsize=4, lw=1, zorder=3)
        base = [_pct(b) for b in v.baseline]
        if any(not math.isnan(b) for b in base):
            ax.hlines(
                base, [x - 0.38 for x in xs], [x + 0.38 for x in xs], colors="black", lw=2.2, zorder=4, label=v.marks
            )
        for j, (label, rates) in enumerate(v.repeats):
            off = (j - (len(v.repeats) - 1) / 2) * 0.09
            ax.scatter(
                [x + off for x in xs],
                [_pct(r) for r in rates],
                s=16,
                zorder=5,
                edgecolors="white",
                linewidths=0.5,
                label=label,
            )
        ax.set_xticks(xs, [f"pos{i}" for i in xs])
        ax.set_ylim(0, 105)
        ax.grid(axis="y", alpha=0.3, zorder=0)
        mode = v.mode_effective or "?"
        if v.mode_requested and v.mode_requested != v.mode_effective:
            mode = f"{v.mode_requested}→{v.mode_effective}"
        failed = f"\nFAIL {', '.join(v.failed)}" if v.failed else ""
        ax.set_title(
            f"{v.cell}\n{mode}, {v.drafts} drafts{failed}",
            fontsize=8,
            color=VERDICT_COLOR["regression"] if failed else "black",
        )
        ax.legend(fontsize=6, loc="lower left", framealpha=0.7)
    axes[0][0].set_ylabel("acceptance %")
    _layout(fig, fig.suptitle(title, fontsize=10) if title else None)
    return fig


def heatmap_figure(hm: HeatmapGrid, title: str = "") -> Figure:
    """Rows: prompts (or bands of prompt length / order when there are many); columns: cell × position;
    colour and label: acceptance %. '≠' marks a row with a prompt whose greedy text differs from the rest
    of its build (the target's numerics changed, not only the drafter)."""
    plt = require()
    import numpy as np

    k, grid, changed, cells, rows = hm.k, hm.grid, hm.changed, hm.cells, hm.rows
    if grid.size == 0:  # an empty or failed run: say so, not an empty image (and matplotlib's warnings)
        fig, ax = plt.subplots(figsize=(4.0, 1.2))
        ax.axis("off")
        ax.text(0.5, 0.5, "no prompt records", ha="center", va="center", fontsize=9)
        if title:
            ax.set_title(title, fontsize=9)
        _layout(fig)
        return fig
    width = max(4.0, 0.55 * len(cells) * k + 2.5)
    height = max(2.5, 0.32 * len(rows) + 1.8)
    fig, ax = plt.subplots(figsize=(width, height))
    im = ax.imshow(grid, vmin=0, vmax=100, cmap="RdYlGn", aspect="auto")
    for ri in range(len(rows)):
        for col in range(grid.shape[1]):
            val = grid[ri, col]
            mark = "≠" if changed[ri, col // k] else ""
            ax.text(col, ri, "–" if np.isnan(val) else f"{val:.0f}{mark}", ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_ylabel(heatmap_axis(hm.rows_kind))
    ax.set_xticks(range(grid.shape[1]), [f"pos{col % k}" for col in range(grid.shape[1])], fontsize=7)
    top = ax.secondary_xaxis("top")
    top.set_xticks([ci * k + (k - 1) / 2 for ci in range(len(cells))], cells, fontsize=7)
    top.tick_params(length=0)
    for ci in range(1, len(cells)):
        ax.axvline(ci * k - 0.5, color="white", lw=3)
    fig.colorbar(im, ax=ax, label="acceptance %", fraction=0.04)
    if title:
        ax.set_title(title, fontsize=9, pad=20)
    _layout(fig)
    return fig


def history_figure(group: HistoryGroup) -> Figure:
    """Per-position acceptance of every cell across the group's runs, change points as vertical lines."""
    plt = require()
    cells = group.cells
    fig, axes = plt.subplots(
        len(cells), 1, figsize=(max(5.0, 0.7 * len(group.runs) + 3), 2.4 * len(cells)), squeeze=False, sharex=True
    )
    xs = list(range(len(group.runs)))
    for ax, cell in zip(axes[:, 0], cells, strict=True):
        for i in range(group.k):
            ys = [_pct(group.rate(cell, n, i)) for n in xs]
            ax.plot(xs, ys, marker="o", ms=4, label=f"pos{i}")
        at: dict[int, list[str]] = {}
        for cp in group.change_points:
            if cp.cell == cell:
                at.setdefault(cp.index, []).append(f"pos{cp.pos} {100 * cp.delta:+.1f}")
        for index, labels in at.items():  # one line and one label per changed run, all positions in it
            ax.axvline(index - 0.5, color="#c62828", ls="--", lw=1)
            ax.annotate(", ".join(labels) + " pts", (index - 0.45, 4), fontsize=7, color="#c62828")
        ax.set_ylim(0, 105)
        ax.set_ylabel("%")
        ax.set_title(cell, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower left")
    axes[-1][0].set_xticks(xs, [r.label for r in group.runs], rotation=30, ha="right", fontsize=7)
    _layout(fig)
    return fig


def rounds_figure(rv: RoundsView, title: str = "") -> Figure:
    """A soak: acceptance per round of one engine, one panel per cell (per position, and the mean in black);
    a red dashed line before the first round that drifted, a cross on a round that stalled."""
    plt = require()
    n = len(rv.cells)
    fig, axes = plt.subplots(n, 1, figsize=(max(5.5, 0.35 * max(map(len, rv.rounds)) + 3.5), 2.4 * n), squeeze=False)
    for j, ax in enumerate(axes[:, 0]):
        xs = rv.rounds[j]
        for i, ys in enumerate(rv.per_pos[j]):
            ax.plot(xs, [_pct(y) for y in ys], marker="o", ms=3, lw=1, label=f"pos{i}")
        ax.plot(xs, [_pct(y) for y in rv.mean[j]], color="black", marker="s", ms=3, lw=1.5, label="mean")
        if rv.drift_round[j] is not None:
            ax.axvline(rv.drift_round[j] - 0.5, color="#c62828", ls="--", lw=1)
            ax.annotate(
                f"drift from round {rv.drift_round[j]}", (rv.drift_round[j] - 0.45, 4), fontsize=7, color="#c62828"
            )
        for r in rv.stalled[j]:
            ax.plot([r], [2], marker="x", color="#c62828", ms=8)
        ax.set_ylim(0, 105)
        ax.set_ylabel("%")
        ax.set_title(rv.cells[j], fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.set_xticks(xs if len(xs) <= 20 else xs[:: max(len(xs) // 20, 1)])
    axes[-1][0].set_xlabel("round (one engine)")
    _layout(fig, fig.suptitle(title, fontsize=9) if title else None)
    return fig


def builds_figure(bv: BuildsView, title: str = "") -> Figure:
    """Builds side by side: one panel per mode/variant, the builds in the run's order along x, one line per
    position; the reference build's column dashed, so a release that falls below it shows as a dip."""
    plt = require()
    n = len(bv.groups)
    width = max(5.5, 0.8 * len(bv.builds) + 3.5)
    fig, axes = plt.subplots(n, 1, figsize=(width, 2.4 * n), squeeze=False)
    xs = list(range(len(bv.builds)))
    ref = bv.builds.index(bv.reference_build)
    for j, ax in enumerate(axes[:, 0]):
        for i in range(bv.k):
            ax.plot(xs, [_pct(bv.rates[j][b][i]) for b in xs], marker="o", ms=3, lw=1, label=f"pos{i}")
        ax.axvline(ref, color="#555", ls="--", lw=1)
        ax.set_ylim(0, 105)
        ax.set_ylabel("%")
        ax.set_title(f"{bv.groups[j]} (dashed: reference build {bv.reference_build})", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.set_xticks(xs)
        ax.set_xticklabels(bv.builds, fontsize=7, rotation=30 if len(bv.builds) > 4 else 0)
    axes[-1][0].set_xlabel("build")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def context_figure(tables: list[ContextTable], title: str = "") -> Figure:
    """A context sweep: acceptance per context bucket, one panel per cell (per position, and the mean in
    black), the shared context's length in tokens along x; a falling line is acceptance decaying with context."""
    from mtpbench.render.words.context import PLOT_X, PLOT_Y

    plt = require()
    n = max(len(tables), 1)
    fig, axes = plt.subplots(n, 1, figsize=(5.5, 2.6 * n), squeeze=False)
    for ax, t in zip(axes[:, 0], tables, strict=False):
        xs = [b.tokens for b in t.buckets]
        k = len(t.buckets[0].per_pos) if t.buckets else 0
        for i in range(k):
            ax.plot(xs, [_pct(b.per_pos[i]) for b in t.buckets], marker="o", ms=3, lw=1, label=f"pos{i}")
        ax.plot(xs, [_pct(b.mean) for b in t.buckets], color="black", marker="s", ms=3, lw=1.5, label="mean")
        ax.set_ylim(0, 105)
        ax.set_xticks(xs)
        ax.set_ylabel(PLOT_Y)
        ax.set_title(t.cell, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[-1][0].set_xlabel(PLOT_X)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def svg(fig: Figure, close: bool = True) -> str:
    """The figure as inline SVG (text kept as text: small, searchable, no font files)."""
    plt = require()
    buf = io.StringIO()
    # No bbox_inches="tight": every figure is laid out by tight_layout already, and the tight box costs
    # another draw pass (~0.1 s a figure, on the report's critical path).
    fig.savefig(buf, format="svg")
    if close:
        plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: the SVG is inlined in HTML


def save_png(fig: Figure, path: Path, close: bool = True) -> Path:
    plt = require()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png", dpi=110)  # laid out already (see svg)
    except OSError as exc:
        raise UserError(f"{path}: cannot write PNG: {exc}") from None
    finally:
        if close:
            plt.close(fig)
    return path
