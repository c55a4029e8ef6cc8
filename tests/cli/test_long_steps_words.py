"""The words of long steps (issue 37, items 15-18), each pinned where a newcomer found it wrong: the prompts bar
counts only recorded prompts; `--help` and `--version` show no `<bool>` type beside a flag; "PASS: 1 cell";
`bisect` on a config of one build names that, not an order; no nanobind leak report from triton at exit.
(The run summary of a sequential run: tests/cli/test_newcomer_edges.py.)"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from clihelp import invoke, one_error_line
from rich.console import Console
from rich.progress import Progress

from mtpbench.cli.progress import ProgressView, progress_bars

REPO = Path(__file__).resolve().parents[2]
GOOD = [98.2, 96.3, 89.9]


def _view(cells: int, prompts: int) -> tuple[ProgressView, io.StringIO]:
    out = io.StringIO()
    bars = Progress(*progress_bars().columns, console=Console(file=out, width=200, force_terminal=False))
    return ProgressView(bars, cells, prompts), out


def _cell(repeat: int) -> SimpleNamespace:
    return SimpleNamespace(cell_id="current/eager/stock", repeat=repeat, hash_seed=repeat)


def test_the_prompts_bar_counts_no_prompt_of_a_cell_repeat_interrupted_before_its_engine_was_up() -> None:
    # Ctrl-C during the first engine start of the selftest: the bar read "prompts 150/600", none recorded.
    view, out = _view(4, 150)
    view("run_start", {"path": "runs/x", "cells": 4})
    view("cell_start", {"cell": _cell(0), "seq": 0})
    view("cell_end", {"cell": _cell(0), "seq": 0, "status": "interrupted", "error": "SIGINT", "wall_s": 3.0})
    prompts = view.p.tasks[view.prompts]
    assert (prompts.completed, prompts.total) == (0, 600)
    assert "0 of 150 prompts recorded: SIGINT" in out.getvalue()


def test_the_prompts_bar_counts_the_one_prompt_a_failed_cell_repeat_recorded() -> None:
    # A sweep whose cell-repeat failed after one prompt read "prompts 150/300".
    view, _ = _view(2, 150)
    view("run_start", {"path": "runs/x", "cells": 2})
    view("cell_start", {"cell": _cell(0), "seq": 0})
    view("prompt_done", {"cell": _cell(0), "seq": 0})
    view("cell_end", {"cell": _cell(0), "seq": 0, "status": "failed", "error": "engine died", "wall_s": 9.0})
    assert view.p.tasks[view.prompts].completed == 1


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["build", "remove", "--help"], ["doctor", "--help"]])
def test_help_shows_no_bool_type_beside_a_flag(args: list[str]) -> None:
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    assert "--help" in res.stdout and "<bool>" not in res.stdout


def test_version_is_one_line_without_a_type() -> None:
    res = invoke("--version")
    assert res.exit_code == 0 and res.stdout.startswith("mtpbench ") and "<bool>" not in res.stdout


def test_a_pass_of_one_cell_says_cell(make_run: Callable[..., Path]) -> None:
    res = invoke("show", make_run({"cpu/eager/stock": [GOOD, GOOD]}, baseline=None))
    assert res.exit_code == 0, res.output
    assert "PASS: 1 cell," in res.stdout and "1 cells" not in res.stdout


def test_bisect_of_a_one_build_config_says_there_is_nothing_to_search_between(tmp_path: Path) -> None:
    res = invoke("bisect", REPO / "configs" / "tiny-gemma4-mtp.yaml", "--out", tmp_path / "runs")
    assert res.exit_code == 2, res.output
    line = one_error_line(res)
    assert "the config lists one (current)" in line and "must come before" not in line
    assert not (tmp_path / "runs").exists()  # refused before any build was measured


def test_a_command_that_loaded_triton_exits_without_nanobind_leak_reports(tmp_path: Path) -> None:
    # `mtpbench reference` ended every run with ~30 lines of "nanobind: leaked …" from triton's extension
    # (torch imports triton): main()'s gc.freeze() kept triton's objects from the last collections, so
    # nanobind found them alive when it checked at interpreter exit. `import triton.language` is the
    # smallest import that leaves such objects (measured: it alone reproduces the report).
    pytest.importorskip("triton")
    code = "import sys, triton.language; from mtpbench.cli import main; sys.argv = ['mtpbench', '--version']; main()"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("mtpbench ")
    assert "nanobind" not in proc.stderr, proc.stderr[:500]
