"""Issue 39 item 4: both per-position definitions (vllm#39359) side by side, each labelled, in the console
table, the Markdown, the JSON and the HTML report."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from mtpbench.judge.compare import Comparison, judge
from mtpbench.render import htmlreport, report
from mtpbench.render.words.positions import POSITIONS_NOTE
from mtpbench.store.baseline import load_baseline
from mtpbench.store.results import load_run
from tests.support.synthetic_runs import PUBLISHED, write_run

RATES = [80.0, 60.0, 30.0]  # unconditional; conditional pos1 = 60/80 = 75 %, pos2 = 30/60 = 50 %


def _comparison(tmp_path: Path) -> Comparison:
    run = write_run(tmp_path / "run", {"cpu/NONE/stock": [RATES, RATES]})
    return judge(load_run(run), load_baseline(PUBLISHED))


def test_summary_rows_carry_unconditional_and_conditional_columns_each_labelled(tmp_path: Path) -> None:
    cols, rows = report.summary_rows(_comparison(tmp_path).cells)
    titles = [c[0] for c in cols]
    assert titles[3:8] == ["pos0 % uncond", "pos1 % uncond", "pos2 % uncond", "pos1 % cond", "pos2 % cond"]
    texts = [cell[0] for cell in rows[0][3:8]]
    assert texts == ["80.0", "60.0", "30.0", "75.0", "50.0"]


def test_console_table_says_which_definition_is_which(tmp_path: Path) -> None:
    buf = io.StringIO()
    Console(file=buf, width=400).print(report.comparison_renderable(_comparison(tmp_path)))
    out = " ".join(buf.getvalue().split())  # the caption wraps to the table's width
    assert "pos1 % cond" in out and "unconditional: accepted at position i / draft steps" in out
    assert "conditional: accepted at position i / accepted at position i-1" in out


def test_markdown_carries_both_columns_and_the_definitions(tmp_path: Path) -> None:
    md = report.comparison_markdown(_comparison(tmp_path))
    assert "pos2 % uncond" in md and "pos2 % cond" in md
    assert f"_{POSITIONS_NOTE}_" in md


def test_json_names_each_definition_beside_the_figures(tmp_path: Path) -> None:
    doc = json.loads(report.comparison_json(_comparison(tmp_path)))
    assert set(doc["per_pos_definitions"]) == {"per_pos", "conditional"}
    assert doc["per_pos_definitions"]["conditional"].startswith("conditional: accepted at position i / accepted")
    s = doc["cells"][0]["summary"]
    assert s["per_pos"] == pytest.approx([0.8, 0.6, 0.3]) and s["conditional"] == pytest.approx([0.8, 0.75, 0.5])


def test_html_cells_table_has_both_definitions(tmp_path: Path) -> None:
    table = htmlreport._cells_table(_comparison(tmp_path), set())
    assert "<th>pos1 % uncond</th>" in table and "<th>pos1 % cond</th>" in table
    assert "<td>75.0</td>" in table and "<td>50.0</td>" in table
