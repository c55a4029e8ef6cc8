"""The report's figures drawn in a second process (mtpbench/render/painter.py) while the run is analysed, and
`report`'s painter step (cli/judge_cmds.judge_run) that hands them their data before the diagnoses.

The painter is an optimisation: whatever it does not deliver (it could not start, exited, hung, answered
garbage, met an error) must be drawn in the report's own process, with the same result or the same error.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mtpbench.cli import app
from mtpbench.cli.judge_cmds import judge_run
from mtpbench.errors import UserError
from mtpbench.judge import views
from mtpbench.judge.compare import judge
from mtpbench.judge.evidence import collect
from mtpbench.judge.findings import Kind
from mtpbench.render import painter
from mtpbench.render.htmlreport import Figures
from mtpbench.store.baseline import load_baseline
from mtpbench.store.results import load_run
from tests.support import browser

ROOT = Path(__file__).resolve().parents[3]
STORED = ROOT / "tests" / "data" / "runs" / "tiny-stock-fault"
BASELINE = ROOT / "tests" / "data" / "tiny-gemma4-mtp-cpu-coding5.yaml"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> list[painter.Job]:
    """The two jobs of a report of the stored run (the real tiny pair, stock and fault), PNGs included."""
    tmp = tmp_path_factory.mktemp("jobs")
    shutil.copytree(STORED, tmp / "run")
    run = load_run(tmp / "run")
    collector = painter.Painter(None)
    figures = Figures(collector, svg=True, png_dir=tmp / "png")
    judge_run(run, None, figures=figures)
    return collector.jobs


def _texts(svg: str | None) -> list[str]:
    assert svg is not None and svg.startswith("<svg")
    return sorted(re.findall(r"<text[^>]*>([^<]*)</text>", svg))


def test_the_child_draws_what_the_parent_would(
    jobs: list[painter.Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = {j.name: painter.draw(j) for j in jobs}
    child_jobs = [painter.Job(j.name, j.figure, j.args, True, tmp_path / f"{j.name}.png") for j in jobs]

    def no_local_drawing(job: painter.Job) -> painter.Drawn:
        raise AssertionError(f"{job.name} was drawn in the parent: the painter's answer was not used")

    with painter.Painter.start() as p:
        assert p.proc is not None
        monkeypatch.setattr(painter, "draw", no_local_drawing)  # the parent's; the child has its own
        for j in child_jobs:
            p.submit(j)
        drawn = p.results()
    assert p.proc is None  # reaped
    assert sorted(drawn) == ["acceptance", "heatmap"]
    for name, d in drawn.items():
        assert isinstance(d, painter.Drawn) and d.error is None
        # Text is kept as text (svg.fonttype none): the same labels, numbers and titles as drawn here.
        assert _texts(d.svg) == _texts(here[name].svg)
        assert d.png == tmp_path / f"{name}.png"
        assert browser.png_size(d.png.read_bytes()) == browser.png_size(here[name].png.read_bytes())  # type: ignore[union-attr]
    assert "current/eager/fault" in drawn["heatmap"].svg  # type: ignore[operator]


@pytest.mark.parametrize(
    ("command", "timeout"),
    [
        (["/nonexistent/python3"], 30.0),  # cannot start
        (["", "-m", "mtpbench.render.painter"], 30.0),  # no sys.executable (an embedded interpreter)
        ([sys.executable, "-c", "pass"], 30.0),  # exits at once, answers nothing
        ([sys.executable, "-c", "import sys; sys.stdin.read(); sys.stdout.write('not a pickle')"], 30.0),
        ([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(3)"], 30.0),  # dies
        ([sys.executable, "-c", "import pickle, sys; sys.stdin.read(); pickle.dump(5, sys.stdout.buffer)"], 30.0),
        ([sys.executable, "-c", "import time; time.sleep(60)"], 1.0),  # hangs without reading
    ],
    ids=["cannot-start", "no-executable", "exits", "garbage", "dies", "not-a-list", "hangs"],
)
def test_what_the_painter_does_not_deliver_is_drawn_here(
    jobs: list[painter.Job], command: list[str], timeout: float
) -> None:
    with painter.Painter.start(command) as p:
        for j in jobs:
            p.submit(j)
        drawn = p.results(timeout=timeout)
    assert p.proc is None
    for j in jobs:
        assert _texts(drawn[j.name].svg) == _texts(painter.draw(j).svg)


def test_a_job_the_child_fails_is_redrawn_here_and_fails_the_same_way(jobs: list[painter.Job], tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    (args,) = [j.args for j in jobs if j.name == "heatmap"]
    job = painter.Job("heatmap", "heatmap", args, False, blocked / "heatmap.png")
    with painter.Painter.start() as p:
        p.submit(job)
        with pytest.raises(UserError, match="cannot write PNG"):
            p.results()


def test_jobs_beyond_the_pipe_budget_are_drawn_here(jobs: list[painter.Job], monkeypatch: pytest.MonkeyPatch) -> None:
    # A child that never reads must not block the parent's writes: what does not fit stays in the parent.
    monkeypatch.setattr(painter, "PIPE_BUDGET", 10)
    with painter.Painter.start([sys.executable, "-c", "import time; time.sleep(60)"]) as p:
        for j in jobs:
            p.submit(j)
        assert p.sent == 0
        drawn = p.results(timeout=1.0)
    assert sorted(drawn) == ["acceptance", "heatmap"] and all(d.svg for d in drawn.values())


def test_report_with_the_painter_writes_the_figures(tmp_path: Path) -> None:
    shutil.copytree(STORED, tmp_path / "run")
    res = CliRunner().invoke(
        app, ["report", str(tmp_path / "run"), "--html", str(tmp_path / "r.html"), "--png", str(tmp_path / "png")]
    )
    assert res.exit_code == 0, res.output
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert page.count("<svg") >= 2 and "current/eager/fault" in page
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == ["acceptance.png", "heatmap.png"]


def test_report_png_into_a_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    shutil.copytree(STORED, tmp_path / "run")
    (tmp_path / "a-file").write_text("")
    res = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "--png", str(tmp_path / "a-file" / "png")])
    assert res.exit_code == 2, res.output
    assert "cannot write PNG" in res.output and "Traceback" not in res.output


# --- the painter step of `report` (cli/judge_cmds.judge_run) ------------------------------------------------


def test_the_painter_step_sees_the_cells_and_checks_before_any_diagnosis(tmp_path: Path) -> None:
    shutil.copytree(STORED, tmp_path / "run")
    run = load_run(tmp_path / "run")
    seen: list[tuple[int, int, set[Kind], str | None]] = []
    judged: list[set[Kind]] = []

    class Seen:
        def measured(self, run, comp) -> None:  # type: ignore[no-untyped-def]
            seen.append((len(comp.cells), len(comp.checks), {d.kind for d in comp.diagnoses}, comp.baseline))

        def judged(self, run, comp) -> None:  # type: ignore[no-untyped-def]
            judged.append({d.kind for d in comp.diagnoses})  # the figures that show verdicts (issue 37 item 10)

    painted = judge_run(run, BASELINE, figures=Seen())  # type: ignore[arg-type]
    # Once; the cells, the 2 × 3 checks and their findings made; no diagnosis yet (the fault's instability).
    assert seen == [(2, 6, {Kind.UNCHECKED, Kind.INCONCLUSIVE}, str(BASELINE))]
    assert Kind.INSTABILITY in {d.kind for d in painted.diagnoses}
    assert len(judged) == 1 and Kind.INSTABILITY in judged[0]  # the bars are drawn from the judged run
    plain = judge(run, load_baseline(BASELINE), baseline_name=str(BASELINE), baseline_path=BASELINE)
    assert [(d.kind, d.cell, d.severity) for d in painted.diagnoses] == [
        (d.kind, d.cell, d.severity) for d in plain.diagnoses
    ]  # the same findings in the same order as without the painter
    assert painted.exit_code == plain.exit_code == 1
    seen.clear()
    judge_run(run, None, figures=Seen())  # type: ignore[arg-type]
    assert seen == [(2, 0, set(), None)]


# --- the heat map's grid (what crosses to the painter) ------------------------------------------------------


def _grid_reference(hm: views.Heatmap, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The grid as plots.heatmap_figure built it before it moved to views (a loop over the frame's rows)."""
    rates = hm.frame
    cells = list(dict.fromkeys(rates["cell"]))
    rows = list(dict.fromkeys(rates["row"]))
    grid = np.full((len(rows), len(cells) * k), np.nan)
    changed = np.zeros((len(rows), len(cells)), dtype=bool)
    for rec in rates.itertuples(index=False):
        ci, ri = cells.index(rec.cell), rows.index(rec.row)
        for i in range(k):
            grid[ri, ci * k + i] = 100 * getattr(rec, f"pos{i}")
        changed[ri, ci] = bool(rec.changed)
    return grid, changed


@pytest.mark.parametrize("max_rows", [40, 2])
def test_heatmap_grid_is_the_frame(tmp_path: Path, max_rows: int) -> None:
    shutil.copytree(STORED, tmp_path / "run")
    run = load_run(tmp_path / "run")
    hm = views.heatmap(run, collect(run), 3, max_rows=max_rows, changed={("current/eager/fault", "class")})
    g = hm.grid(3)
    want_grid, want_changed = _grid_reference(hm, 3)
    np.testing.assert_array_equal(g.grid, want_grid)
    np.testing.assert_array_equal(g.changed, want_changed)
    assert g.changed.sum() == 1  # the marked prompt's row (or band) of the fault cell
    assert g.cells == ["current/eager/stock", "current/eager/fault"] and g.rows_kind == hm.rows and g.k == 3


def test_mtpbench_painter_0_draws_in_this_process(jobs: list[painter.Job], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTPBENCH_PAINTER", "0")
    with painter.Painter.start() as p:
        assert p.proc is None  # no child started
        for j in jobs:
            p.submit(j)
        assert all(d.svg for d in p.results().values())


def test_order_positions_is_the_dict_rule() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        ids = [f"p{x}" for x in rng.integers(0, 30, rng.integers(0, 25))]  # repeats and gaps
        prompts = np.array([f"p{x}" for x in rng.permutation(40)[: rng.integers(0, 40)]] + [7], dtype=object)
        order = {p: n for n, p in enumerate(ids)}
        want = [order.get(str(p), -1) for p in prompts]
        got, distinct = views.order_positions(ids, prompts)
        assert got.tolist() == want and distinct == len(order)


def test_an_empty_run_draws_a_plain_note_not_an_empty_image(tmp_path: Path) -> None:
    import warnings

    shutil.copytree(STORED, tmp_path / "run")
    (tmp_path / "run" / "records.jsonl").write_text("")
    run = load_run(tmp_path / "run")
    collector = painter.Painter(None)
    figures = Figures(collector, svg=True, png_dir=None)
    judge_run(run, None, figures=figures)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warned of singular limits on a 0 × 0 image
        drawn = collector.results()
    assert "no prompt records" in (drawn["heatmap"].svg or "")


@pytest.mark.parametrize(("flag", "make"), [("--html", "dir"), ("--png", "file")])
def test_report_outputs_that_cannot_be_written_are_named_before_the_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str, make: str
) -> None:
    target = tmp_path / "out"
    target.mkdir() if make == "dir" else target.write_text("")

    def no_load(*_: object) -> None:
        raise AssertionError("the run was loaded before the output was checked")

    monkeypatch.setattr("mtpbench.store.results.load_run", no_load)
    res = CliRunner().invoke(app, ["report", str(STORED), flag, str(target)])
    assert res.exit_code == 2 and flag in res.output and "Traceback" not in res.output
