"""The HTML report's edges a newcomer met (issue 30, part 4): the primary endpoint's table first and headed so,
heat-map bands whose labels neither overlap nor leave gaps, captions that say "band" where rows are bands,
figure titles that fit their PNG, and a cells table that is not cut in a 1200-px window.

The stored run is the real tiny pair (tests/data/runs/tiny-stock-fault, see test_report_html.py); the band
labels and the titles are checked on constructed data.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mtpbench.cli.judge_cmds import judge_run
from mtpbench.judge import views
from mtpbench.judge.compare import Comparison
from mtpbench.judge.figdata import CellView, HeatmapGrid
from mtpbench.render import plots
from mtpbench.render.htmlreport import render_html, write_report
from mtpbench.store.results import Run, load_run
from tests.support import browser

ROOT = Path(__file__).resolve().parents[3]
STORED = ROOT / "tests" / "data" / "runs" / "tiny-stock-fault"
BASELINE = ROOT / "tests" / "data" / "tiny-gemma4-mtp-cpu-coding5.yaml"
NO_FIGURES = {"acceptance": "<svg></svg>", "heatmap": "<svg></svg>"}


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Comparison]:
    """The stored run against the baseline it was measured against: AL and per-position checks, and two
    identity fields the baseline lacks (the 'not checked' line that once replaced the AL table)."""
    dst = tmp_path_factory.mktemp("edges") / "run"
    shutil.copytree(STORED, dst)
    run = load_run(dst)
    return run, judge_run(run, BASELINE)


def _label_range(label: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)(?:–(\d+))? tokens", label)
    assert m, label
    return int(m.group(1)), int(m.group(2) or m.group(1))


@pytest.mark.parametrize("seed", range(40))
def test_token_band_labels_are_disjoint_contiguous_and_hold_their_prompts(seed: int) -> None:
    # Prompt lengths whose quantiles fall on whole tokens: qcut's labels read "129–146" then "146–171",
    # and ties at a whole edge gave "214–214" beside "207–214".
    rng = np.random.default_rng(seed)
    n = int(rng.integers(11, 400))
    tokens = rng.integers(100, 100 + int(rng.integers(3, 300)), n).astype(np.float64)
    if seed == 0:
        tokens = np.array([116, 130, 150, 180, 200, 214, 214, 216, 230, 244] * 3, dtype=np.float64)
    codes, labels = views.token_bands(tokens, 10)
    ranges = [_label_range(label) for label in labels]
    assert 1 <= len(labels) <= 10
    assert ranges[0][0] == tokens.min() and ranges[-1][1] == tokens.max()
    for (low, high), (next_low, _) in itertools.pairwise(ranges):
        assert low <= high and next_low == high + 1, labels
    for t, code in zip(tokens, codes, strict=True):
        low, high = ranges[code]
        assert low <= t <= high, (t, labels[code])
    assert set(codes) == set(range(len(labels)))  # no label without a prompt


def test_order_band_labels_end_at_the_last_prompt(make_run: Callable[..., Path]) -> None:
    # 5 configured prompts in bands of 3 (2 rows at most): "1–3", "4–5", not "4–6".
    run = load_run(make_run({"b/eager/stock": [[90, 80, 70]]}))
    hm = views.heatmap(run, judge_run(run, None).cells, 3, max_rows=2)
    assert hm.rows == "prompt order"
    assert list(dict.fromkeys(hm.frame["row"])) == ["1–3", "4–5"]


def test_primary_endpoint_comes_first_and_is_headed(judged: tuple[Run, Comparison]) -> None:
    run, comp = judged
    assert comp.gate.primary == "acceptance_length" and comp.lengths and comp.unchecked
    page = render_html(run, comp, NO_FIGURES, set())
    primary = page.index('<section id="primary">')
    heading = re.search(r'<section id="primary"><h2>([^<]*)</h2>', page)
    assert heading and heading.group(1).startswith("Primary endpoint: acceptance length (AL)")
    # The AL table is in that section, once, before the diagnoses, the figures and the per-position checks.
    assert page.count('<table id="lengths">') == 1
    lengths = page.index('<table id="lengths">')
    assert primary < lengths < page.index('id="diagnoses"') < page.index('id="fig-acceptance"')
    assert lengths < page.index('<table id="checks">')
    assert "(diagnoses)" in page[page.index('<section id="diagnosis-checks">') :][:200]
    assert "Not checked (the baseline lacks them): model_weights_sha256" in page  # kept beside it
    # Under gate.primary positions the per-position table is the one first and headed so; AL is a diagnosis.
    positions = dataclasses.replace(comp, gate=comp.gate.model_copy(update={"primary": "positions"}))
    page = render_html(run, positions, NO_FIGURES, set())
    assert "<h2>Primary endpoint: per-position acceptance" in page
    assert page.index('<section id="primary">') < page.index('<table id="checks">') < page.index('id="diagnoses"')
    assert page.index('<section id="diagnosis-checks">') < page.index('<table id="lengths">')
    # Without a baseline nothing is the primary endpoint: no such section, and the page says why.
    alone = render_html(run, judge_run(run, None), NO_FIGURES, set())
    assert 'id="primary"' not in alone and "No baseline given" in alone


def test_heatmap_caption_and_title_say_band_where_rows_are_bands(
    judged: tuple[Run, Comparison], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, comp = judged
    # Two rows at most: the stored run's 5 prompts become bands of prompt length, as a serving run's would.
    monkeypatch.setattr(views, "heatmap", functools.partial(views.heatmap, max_rows=2))
    out = write_report(run, comp, tmp_path / "r.html", None)
    page = out.html_path.read_text(encoding="utf-8")  # type: ignore[union-attr]
    figure = page[page.index('id="fig-heatmap"') :]
    caption = figure[figure.index("<figcaption>") : figure.index("</figcaption>")]
    assert "per band of prompt tokens" in caption and "per prompt and position" not in caption
    assert "≠ marks a band" in caption
    assert "acceptance per band of prompt tokens" in figure[: figure.index("<figcaption>")]  # the SVG's title
    assert "band of prompt tokens</text>" in figure  # the row axis


def _titles_inside(fig: object) -> list[str]:
    """The titles (the figure's and each panel's) that do not lie within the drawn figure."""
    fig.canvas.draw()  # type: ignore[attr-defined]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    box = fig.bbox  # type: ignore[attr-defined]
    texts = [fig._suptitle, *(ax.title for ax in fig.axes)]  # type: ignore[attr-defined]
    out = []
    for t in texts:
        if t is None or not t.get_text():
            continue
        b = t.get_window_extent(renderer)
        if b.x0 < box.x0 - 0.5 or b.x1 > box.x1 + 0.5 or b.y0 < box.y0 - 0.5 or b.y1 > box.y1 + 0.5:
            out.append(t.get_text())
    return out


def _view(cell: str) -> CellView:
    rates: list[float | None] = [0.9, 0.8, 0.7]
    return CellView(cell, None, "NONE", rates, [None] * 3, [None] * 3, [""] * 3, [("r0 seed 0", rates)], 100)


def test_png_titles_lie_within_the_figure(tmp_path: Path) -> None:
    plt = plots.require()
    long_title = "run 20261203T081532Z-tiny-gemma4-mtp-selftest vs " + "/a/very/long/checkout/path" * 4 + "/b.yaml"
    cell = "vllm-ascend-v0.26.0rc1-g0123456789abcdef/FULL_DECODE_ONLY/flatten-draft-metadata-and-more"
    one = plots.acceptance_figure([_view(cell)], long_title)
    three = plots.acceptance_figure([_view(cell), _view(cell), _view(cell)], long_title)
    band = HeatmapGrid(["b/eager/stock"], ["1–3", "4–5"], "prompt tokens", 3, np.full((2, 3), 50.0), np.zeros((2, 1)))
    band_title = "acceptance per band of prompt tokens and position (pooled over repeats)"
    heat = plots.heatmap_figure(band, band_title)
    prompt_title = "acceptance per prompt and position (pooled over repeats)"  # the stored run's, 2 cells
    wide = plots.heatmap_figure(
        HeatmapGrid(["a", "b"], ["p1", "p2"], "prompt", 3, np.full((2, 6), 50.0), np.zeros((2, 2))), prompt_title
    )
    empty = plots.heatmap_figure(HeatmapGrid([], [], "prompt", 3, np.zeros((0, 0)), np.zeros((0, 0))), band_title)
    try:
        for fig in (one, three, heat, wide, empty):
            assert _titles_inside(fig) == []
        # The PNG is what a PR comment shows: written from the same layout.
        assert plots.save_png(one, tmp_path / "one.png", close=False).stat().st_size > 1000
        assert "\n" in one._suptitle.get_text()  # type: ignore[union-attr]  # wrapped, not shrunk or dropped
        # A title that fits is left as it was.
        assert wide.axes[0].title.get_text() == prompt_title
    finally:
        for fig in (one, three, heat, wide, empty):
            plt.close(fig)


def _wide_run(make_run: Callable[..., Path]) -> Run:
    """Seven positions and build/mode/variant names with no space or hyphen to break at: the cells table is
    wider than a 1200-px window unless it wraps or scrolls."""
    cells = {
        f"build_{n}_vllm_ascend_v0_26_0rc1_g0123456789abcdef/FULL_DECODE_ONLY_{n}/flatten_draft_metadata_{n}": [
            [90, 80, 70, 60, 50, 40, 30]
        ]
        for n in range(3)
    }
    return load_run(make_run(cells, k=7, baseline=None))


def test_cells_table_sits_in_a_box_that_wraps_or_scrolls(make_run: Callable[..., Path]) -> None:
    run = _wide_run(make_run)
    page = render_html(run, judge_run(run, None), NO_FIGURES, set())
    assert re.search(r'<div class="wide"><table id="cells">', page)
    assert re.search(r"\.wide\{[^}]*overflow-x:auto", page)
    assert "build_0_vllm_ascend_v0_26_0rc1_g0123456789abcdef/<wbr>FULL_DECODE_ONLY_0/<wbr>" in page


@pytest.mark.skipif(browser.chromium() is None and os.environ.get("CI") != "true", reason="no chromium here")
def test_cells_table_is_not_cut_at_1200_px(make_run: Callable[..., Path], tmp_path: Path) -> None:
    run = _wide_run(make_run)
    page = tmp_path / "r.html"
    page.write_text(render_html(run, judge_run(run, None), NO_FIGURES, set()), encoding="utf-8")
    res = browser.open_page(
        page,
        {
            "inner": "window.innerWidth",
            "page": "document.documentElement.scrollWidth",
            "table_right": "document.getElementById('cells').getBoundingClientRect().right",
            "box_right": "document.getElementById('cells').parentElement.getBoundingClientRect().right",
            "box_scrolls": "getComputedStyle(document.getElementById('cells').parentElement).overflowX",
        },
        width=1200,
    )
    v = res.values
    assert v["inner"] == 1200 and res.console_errors == []
    assert v["page"] <= v["inner"], v  # nothing runs off the window's right edge
    # The whole table is in view, or its box scrolls to the rest.
    assert v["table_right"] <= v["box_right"] or v["box_scrolls"] in ("auto", "scroll"), v
