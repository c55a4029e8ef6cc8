"""Issue 29, "in compare, report (a reference column / overlay) and JSON": once `mtpbench reference` has stored a
reference beside a run, `compare` (console, Markdown, JSON) and `report --html` show each cell's per-position
engine rate beside the reference's, the exact-match share and the largest deviation, and the reference's
findings take part in the gate's verdict and exit code. The run passes the published baseline on its own, so
an exit 1 here is the reference's."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import invoke
from tests.support.reference_runs import GOOD, per_prompt, write_reference
from tests.support.synthetic_runs import PROMPTS, PUBLISHED

CELL = "a/NONE/stock"  # judged by the published baseline's NONE entry
# 33 steps accepting 95 drafts (100 / 97.0 / 90.9 %): above the published baseline (98.2 / 96.3 / 89.9), 9.1
# points below the reference's 100 % at position 2, and 95 + 33 + 1 = 129 tokens: the counters add up with
# the reference's 128-token text, so the only finding is the drop.
CLOSE = (33, [33, 32, 30])


def _replayed(make_run: Callable[..., Path]) -> Path:
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(CLOSE)})
    assert invoke("compare", run, "--baseline", PUBLISHED).exit_code == 0  # the gate alone passes it
    write_reference(run, [CELL], GOOD)
    return run


def test_compare_shows_the_reference_beside_the_engine_and_fails_on_it(make_run: Callable[..., Path]) -> None:
    run = _replayed(make_run)
    result = invoke("compare", run, "--baseline", PUBLISHED)
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert "engine vs reference (acceptance from the weights)" in out
    assert "eng / ref" in out
    # pos2: the engine's 90.9 % beside the reference's 100.0 %, marked below, Δ −9.1 points.
    assert "90.9 / 100.0 ▼" in out and "Δ -9.1" in out
    assert f"0/{len(PROMPTS)}" in out  # no prompt counts exactly what the weights say
    assert f"FAIL engine-below-reference {CELL}" in out


def test_compare_markdown_carries_the_reference_table(make_run: Callable[..., Path]) -> None:
    run = _replayed(make_run)
    result = invoke("compare", run, "--baseline", PUBLISHED, "--markdown")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    title = next(i for i, line in enumerate(lines) if "engine vs reference" in line)
    header, _rule, row = lines[title + 2 : title + 5]
    assert header.startswith("| cell | exact | largest Δ pts | pos0 eng / ref |")
    assert row.startswith(f"| `{CELL}` | 0/{len(PROMPTS)} | -9.1 ")
    assert "90.9 / 100.0 ▼ Δ -9.1" in row
    assert "**FAIL engine-below-reference**" in result.stdout


def test_compare_json_has_the_per_position_reference_and_its_finding(make_run: Callable[..., Path]) -> None:
    run = _replayed(make_run)
    result = invoke("compare", run, "--baseline", PUBLISHED, "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["exit_code"] == 1 and doc["verdict"] == "fail"
    (cell,) = doc["reference"]["cells"]
    assert cell["cell"] == CELL
    assert (cell["exact"], cell["same_text"], cell["observations"]) == (0, len(PROMPTS), len(PROMPTS))
    assert cell["largest"]["position"] == 2 and cell["largest"]["points"] == pytest.approx(-100 * (1 - 30 / 33))
    pooled = {c["position"]: c for c in cell["checks"] if c["repeat"] is None}
    assert pooled["pos2"]["engine"] == pytest.approx(30 / 33) and pooled["pos2"]["reference"] == 1.0
    assert pooled["pos2"]["below"] and not pooled["pos0"]["below"] and not pooled["AL"]["below"]
    (f,) = [f for f in doc["findings"] if f["kind"] == "engine-below-reference"]
    assert f["exit_code"] == 1 and f["numbers"]["positions"] == [2]
    assert "findings" not in doc["reference"]  # the findings are the document's own, listed once


def test_a_run_never_replayed_has_no_reference_anywhere(make_run: Callable[..., Path]) -> None:
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(CLOSE)})
    doc = json.loads(invoke("compare", run, "--baseline", PUBLISHED, "--json").stdout)
    assert "reference" not in doc
    assert "engine vs reference" not in invoke("compare", run, "--baseline", PUBLISHED).stdout


def test_the_html_report_tables_the_reference(make_run: Callable[..., Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = _replayed(make_run)
    page = tmp_path / "r.html"
    result = invoke("report", run, "--baseline", PUBLISHED, "--html", page)
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert 'class="verdict exit-1"' in text  # the reference's finding decides the verdict shown
    table = text[text.index('<table id="reference">') :]
    table = table[: table.index("</table>")]
    assert f'<td class="l">{CELL}</td>' in table
    assert '<td class="regression">90.9 / 100.0 ▼<br>Δ -9.1</td>' in table
    assert "engine-below-reference" in text


def test_the_report_figure_of_a_run_below_its_weights_shows_the_reference_and_the_failure(
    make_run: Callable[..., Path],
) -> None:
    # Issue 37 item 10: `report --png` of a run that failed engine-below-reference drew plain grey bars.
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    from mtpbench.judge.compare import judge
    from mtpbench.judge.views import cell_views
    from mtpbench.render.plots import VERDICT_COLOR, acceptance_figure
    from mtpbench.store.results import load_run

    run = _replayed(make_run)
    comp = judge(load_run(run))  # no baseline given: the reference alone judges the run
    assert comp.exit_code == 1
    (view,) = cell_views(comp)
    assert view.marks == "reference (weights)" and view.baseline == [1.0, 1.0, 1.0]
    assert view.verdicts == ["", "", "regression"] and view.failed == ["engine-below-reference"]
    fig = acceptance_figure([view])
    ax = fig.axes[0]
    assert "FAIL engine-below-reference" in ax.get_title()
    assert "reference (weights)" in ax.get_legend_handles_labels()[1]
    bars = [to_hex(p.get_facecolor()) for p in ax.patches]
    assert bars[2] == VERDICT_COLOR["regression"] and bars[0] != VERDICT_COLOR["regression"]
    # What `report` hands its painter is that view: drawn from the judged run, not from its cells alone.
    from mtpbench.cli.judge_cmds import judge_run
    from mtpbench.render.htmlreport import Figures
    from mtpbench.render.painter import Painter

    collector = Painter(None)
    judge_run(load_run(run), None, figures=Figures(collector, svg=False, png_dir=run.parent / "png"))
    (bars,) = [job.args[0] for job in collector.jobs if job.name == "acceptance"]
    assert bars[0].marks == "reference (weights)" and bars[0].failed == ["engine-below-reference"]
    png = run.parent / "png"
    assert invoke("report", run, "--html", run.parent / "r.html", "--png", png).exit_code == 0
    assert (png / "acceptance.png").stat().st_size > 0
