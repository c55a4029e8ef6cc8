"""The command line end to end (no engine): exit codes, one-line errors, output formats."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import PUBLISHED
from typer.testing import CliRunner

from mtpbench.cli import app

REPO = Path(__file__).resolve().parent.parent
runner = CliRunner()
GOOD = [98.2, 96.3, 89.9]


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], env={"MTPBENCH_WIDTH": "200", "COLUMNS": "200"})


def one_error_line(result) -> str:
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_compare_regression_exit_1_with_table_and_junit(make_run: Callable[..., Path], tmp_path: Path) -> None:
    run = make_run({"ascend/FULL_DECODE_ONLY/stock": [[11.7, 3.0, 1.3], [77.8, 56.0, 38.4]]}, seeds=[2, 0])
    junit = tmp_path / "gate.xml"
    res = invoke("compare", run, "--baseline", PUBLISHED, "--junit", junit)
    assert res.exit_code == 1, res.output
    assert "regression" in res.stdout and "cross-process-instability" in res.stdout
    assert "FAIL: cross-process-instability, regression in 1 cell(s) (exit 1)" in res.stdout
    xml = junit.read_text()
    assert xml.count("<testcase") == 3 + 2 and xml.count("<failure") == 4


def test_compare_pass_exit_0_json_and_markdown(make_run: Callable[..., Path]) -> None:
    run = make_run({"ascend/NONE/stock": [GOOD, GOOD]})
    res = invoke("compare", run, "--baseline", PUBLISHED, "--json")
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert data["exit_code"] == 0 and data["cells"][0]["summary"]["per_pos"] == pytest.approx([0.982, 0.963, 0.899])
    md = invoke("compare", run, "--baseline", PUBLISHED, "--markdown")
    assert md.exit_code == 0 and "| `ascend/NONE/stock` | 0 | 98.2 | 98.2 | +0.0 | pass |" in md.stdout


def test_compare_tolerance_option(make_run: Callable[..., Path]) -> None:
    run = make_run({"ascend/NONE/stock": [[95.0, 93.0, 87.0]]})
    assert invoke("compare", run, "--baseline", PUBLISHED).exit_code == 0
    assert invoke("compare", run, "--baseline", PUBLISHED, "--tolerance", "1").exit_code == 1


def test_not_comparable_exit_4(make_run: Callable[..., Path]) -> None:
    res = invoke("compare", make_run({"a/NONE/stock": [[90.0] * 4]}, k=4), "--baseline", PUBLISHED)
    assert res.exit_code == 4
    assert "not comparable" in one_error_line(res)


def test_show_summary(make_run: Callable[..., Path]) -> None:
    res = invoke("show", make_run({"cpu/eager/stock": [GOOD, GOOD]}))
    assert res.exit_code == 0
    assert "98.2" in res.stdout and "2/2" in res.stdout and "3.84" in res.stdout


def test_baseline_save_then_compare_and_refuse_overwrite(make_run: Callable[..., Path], tmp_path: Path) -> None:
    run = make_run({"cpu/eager/stock": [GOOD, GOOD], "cpu/eager/fault": [[50.0, 30.0, 10.0]] * 2})
    out = tmp_path / "b.yaml"
    res = invoke("baseline", "save", run, "--out", out)
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "source: mtpbench run 20261202T000000Z-synthetic" in text and "accepted_per_pos" in text
    assert invoke("compare", run, "--baseline", out).exit_code == 1  # the fault cells regress against stock
    again = invoke("baseline", "save", run, "--out", out)
    assert again.exit_code == 2 and "--force" in one_error_line(again)
    assert invoke("baseline", "save", run, "--out", out, "--force").exit_code == 0


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "config file not found"),
        ("model: [unclosed", "malformed YAML"),
        ("- a list", "expected a mapping"),
        ("name: x\nmodel: m\nspeculative: {method: mtp, num_speculative_tokens: 3}\nprompts: p.yaml\nbogus: 1",
         "bogus: unknown key"),
        ("name: x\nmodel: m\nspeculative: {method: mtp, num_speculative_tokens: 0}\nprompts: p.yaml",
         "speculative.num_speculative_tokens"),
        ("name: x\nmodel: m\nspeculative: {method: mtp, num_speculative_tokens: three}\nprompts: p.yaml",
         "speculative.num_speculative_tokens"),
        ("name: x\nmodel: m\nspeculative: {method: mtp, num_speculative_tokens: 3}\nprompts: missing.yaml",
         "prompts file not found"),
        ("name: x\nmodel: m\nspeculative: {method: mtp, num_speculative_tokens: 3}\nprompts: p.yaml\n"
         "variants: {v: [no-such-patch]}", "unknown patch 'no-such-patch'"),
        ("name: x\nmodel: m\nspeculative: {method: mtp, num_speculative_tokens: 3}\nprompts: empty.yaml",
         "the prompt set is empty"),
    ],
)  # fmt: skip
def test_bad_config_is_one_line_exit_2(tmp_path: Path, content: str | None, needle: str) -> None:
    (tmp_path / "p.yaml").write_text("name: p\nprompts:\n  - {id: a, text: 'def f():'}\n")
    (tmp_path / "empty.yaml").write_text("name: p\nprompts: []\n")
    cfg = tmp_path / "c.yaml"
    if content is not None:
        cfg.write_text(content)
    res = invoke("run", cfg, "--dry-run")
    assert res.exit_code == 2, res.output
    line = one_error_line(res)
    assert needle in line and (str(cfg) in line or "empty.yaml" in line or "missing.yaml" in line)


def test_unknown_mode_selection_is_exit_2() -> None:
    res = invoke("run", REPO / "configs" / "gemma4-mtp-ascend.yaml", "--mode", "PIECEWISE", "--dry-run")
    assert res.exit_code == 2 and "--mode 'PIECEWISE'" in one_error_line(res)


def test_dry_run_lists_stock_and_fixed_cells_with_their_environment() -> None:
    res = invoke("run", REPO / "configs" / "gemma4-mtp-ascend.yaml", "--dry-run")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "12 cell-repeats = 1 builds × 2 modes × 2 variants × 3 repeats" in out
    assert out.count("vllm-ascend/FULL_DECODE_ONLY/fixed repeat") == 3
    assert "MTPBENCH_PATCHES=ascend-gemma4-layer-params" in out
    assert "MTPBENCH_PATCHES=''" in out  # stock cells: a user's own setting must not leak in
    for seed in (0, 1, 2):
        assert f"PYTHONHASHSEED={seed} VLLM_ENABLE_V1_MULTIPROCESSING=0" in out
    assert "'cudagraph_mode': 'FULL_DECODE_ONLY'" in out
    assert "dry run: nothing was started" in out


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda p: (p / "manifest.json").unlink(), "not a mtpbench run"),
        (lambda p: (p / "manifest.json").write_text("{nope"), "unreadable manifest"),
        (lambda p: (p / "records.jsonl").write_text("x\n" + (p / "records.jsonl").read_text()), ":1: corrupt JSON"),
        (lambda p: (p / "records.jsonl").write_text('{"type": "prompt", "schema": 99}\n'), "record schema 99 is newer"),
    ],
)  # fmt: skip
def test_bad_results_are_one_line_exit_2(make_run: Callable[..., Path], mutate, needle: str) -> None:
    run = make_run({"cpu/eager/stock": [GOOD]})
    mutate(run)
    for cmd in (["show", run], ["compare", run, "--baseline", PUBLISHED]):
        res = invoke(*cmd)
        assert res.exit_code == 2, res.output
        assert needle in one_error_line(res)


def test_baseline_of_another_schema_is_exit_2(make_run: Callable[..., Path], tmp_path: Path) -> None:
    bad = tmp_path / "b.yaml"
    bad.write_text(PUBLISHED.read_text().replace("schema: 1", "schema: 7"))
    res = invoke("compare", make_run({"a/NONE/stock": [GOOD]}), "--baseline", bad)
    assert res.exit_code == 2 and "baseline schema 7 is newer than mtpbench" in one_error_line(res)


def test_real_command_in_subprocess_no_traceback(tmp_path: Path) -> None:
    # pyperf-style: the installed entry point, a real process, the whole stderr.
    proc = subprocess.run(
        [sys.executable, "-m", "mtpbench", "compare", str(tmp_path / "nope"), "--baseline", str(PUBLISHED)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"mtpbench: error: {tmp_path / 'nope'}: no such run folder\n"
