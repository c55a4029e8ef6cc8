"""The HTML report's builds × positions view (issue 28, part 3): a run of several builds gets a table of each
build's acceptance per position beside the reference build's, its build-divergence verdict, and a figure; a
run of one build gets neither. Constructed runs (tests/support/synthetic_runs.py), the real `report` command."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from mtpbench.judge.compare import judge
from mtpbench.judge.views import builds_view
from mtpbench.store.results import load_run
from tests.support.cli import invoke

GOOD = [98.2, 96.3, 89.9]
PLANTED = [98.2, 80.0, 59.9]


def test_builds_view_holds_each_build_against_the_reference(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run({"v1/eager/stock": [GOOD], "v2/eager/stock": [PLANTED], "v3/eager/stock": [GOOD]}, baseline=None)
    )
    bv = builds_view(run, judge(run))
    assert bv is not None and bv.reference_build == "v1" and bv.builds == ["v1", "v2", "v3"]
    assert bv.groups == ["eager/stock"] and bv.k == 3
    assert bv.deltas[0][0] == [None, None, None]  # the reference build against itself: nothing
    assert bv.deltas[0][1][2] == pytest.approx(-0.30, abs=0.005) and bv.deltas[0][2][2] == pytest.approx(0.0)
    assert bv.flagged[0] == ["", "fail", ""]


def test_one_build_has_no_builds_view(make_run: Callable[..., Path]) -> None:
    run = load_run(make_run({"v1/eager/stock": [GOOD]}, baseline=None))
    assert builds_view(run, judge(run)) is None


def test_the_html_report_shows_builds_by_positions(make_run: Callable[..., Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = make_run({"v1/eager/stock": [GOOD], "v2/eager/stock": [PLANTED]}, baseline=None)
    page_path = tmp_path / "r.html"
    res = invoke("report", run, "--html", page_path)
    assert res.exit_code == 0, res.output  # report writes the page; the gate is run/compare's
    page = page_path.read_text(encoding="utf-8")
    table = re.search(r'<table id="builds-table">(.*?)</table>', page, re.S)
    assert table is not None and 'id="fig-builds"' in page and "<svg" in page.split('id="fig-builds"')[1][:200]
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)
    assert len(rows) == 3  # the header, then v1 (the reference), then v2
    assert "<code>v1</code> (reference)" in rows[1] and "none" in rows[1]
    assert "<code>v2</code>" in rows[2] and "59.9 (-30.0)" in rows[2] and 'class="regression">fail' in rows[2]


def test_one_build_report_has_no_builds_section(make_run: Callable[..., Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = make_run({"v1/eager/stock": [GOOD]}, baseline=None)
    res = invoke("report", run, "--html", tmp_path / "r.html")
    assert res.exit_code == 0, res.output
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'id="builds"' not in page and 'id="fig-builds"' not in page
