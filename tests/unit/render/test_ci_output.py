"""CI-native output: JUnit that validates against Jenkins' JUnit schema, GitHub Actions step summary and
::error annotations, and logs (stdout not a terminal) in which no cell, number or verdict is cut."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import xmlschema
from typer.testing import CliRunner

from mtpbench.cli import app
from mtpbench.judge.compare import judge
from mtpbench.render import ci, junit
from mtpbench.render.words import finding_message
from mtpbench.store.baseline import load_baseline
from mtpbench.store.results import load_run
from tests.support.synthetic_runs import PUBLISHED

ROOT = Path(__file__).resolve().parents[3]
XSD = ROOT / "tests" / "data" / "junit-jenkins.xsd"
STORED = ROOT / "tests" / "data" / "runs" / "tiny-stock-fault"
# The baseline the stored runs were measured against (5 coding prompts); the shipped one moves on.
TINY_BASELINE = ROOT / "tests" / "data" / "tiny-gemma4-mtp-cpu-coding5.yaml"
LONG = "vllm-ascend-v0.26.0rc1-nightly/FULL_DECODE_ONLY/ascend-gemma4-layer-params"


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(XSD))


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(STORED, dst)
    return dst


def test_junit_of_a_failing_gate_validates(schema: xmlschema.XMLSchema, stored: Path) -> None:
    comp = judge(load_run(stored), load_baseline(TINY_BASELINE))
    xml = junit.comparison_junit(comp)
    schema.validate(xml)
    # Five prompts against a pooled baseline: each cell's acceptance length inconclusive (2 failing checks;
    # the positions' inconclusive is a diagnosis under the default gate), the fault's exact cross-process
    # instability; the gate's verdict is the instability's exit 1.
    assert 'failures="3"' in xml and 'errors="0"' in xml and comp.exit_code == 1
    assert xml.count('name="acceptance-length"') == 2


def test_junit_with_skipped_checks_validates(schema: xmlschema.XMLSchema, make_run: Callable[..., Path]) -> None:
    run = make_run({"ascend/NONE/stock": [[98.0, 96.0, 90.0]], "ascend/eager/stock": [[98.0, 96.0, 90.0]]})
    xml = junit.comparison_junit(judge(load_run(run), load_baseline(PUBLISHED)))
    schema.validate(xml)
    assert "<skipped" in xml and 'skipped="3"' in xml


def test_schema_rejects_a_suite_without_errors_count(schema: xmlschema.XMLSchema) -> None:
    # The validator has teeth: mtpbench's JUnit before this fix had no `errors` attribute.
    bad = '<testsuite name="x" tests="1" failures="0"><testcase name="pos0"/></testsuite>'
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        schema.validate(bad)


def _compare_cli(run: Path, baseline: Path, *extra: str, env: dict[str, str]) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["compare", str(run), "--baseline", str(baseline), *extra], env=env)
    return res.exit_code, res.stdout, res.stderr


def test_github_actions_summary_and_annotations(make_run: Callable[..., Path], tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    # The seed's collapse, one process per hash seed: a regression at every position and the instability.
    run = make_run({"ascend/FULL_DECODE_ONLY/stock": [[11.7, 3.0, 1.3], [77.8, 56.0, 38.4]]}, seeds=[2, 0])
    code, out, _ = _compare_cli(run, PUBLISHED, env=env)
    assert code == 1
    errors = [line for line in out.splitlines() if line.startswith("::error ")]
    for pos in (0, 1, 2):
        assert any(f"title=mtpbench regression%3A ascend/FULL_DECODE_ONLY/stock pos{pos}::" in e for e in errors), (
            errors
        )
    assert any("cross-process-instability%3A ascend/FULL_DECODE_ONLY/stock pos" in e for e in errors), errors
    assert len(errors) == 4
    text = summary.read_text()
    assert text.startswith("earlier step\n")  # appended, never overwritten
    assert "FAIL: cross-process-instability, regression" in text and "| `ascend/FULL_DECODE_ONLY/stock` | 0 |" in text


def test_github_flag_without_actions_env(stored: Path, tmp_path: Path) -> None:
    summary = tmp_path / "s.md"
    code, out, _ = _compare_cli(stored, TINY_BASELINE, "--github", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert code == 1 and out.count("::error ") == 3 and summary.exists()  # instability + two inconclusive cells
    code, out, _ = _compare_cli(stored, TINY_BASELINE, env={"GITHUB_ACTIONS": ""})
    assert code == 1 and "::error" not in out


def test_annotation_escaping() -> None:
    assert ci.workflow_command("error", "a: b, c", "50% off\nnext") == "::error title=a%3A b%2C c::50%25 off%0Anext"


def test_passing_gate_has_no_error_annotation(make_run: Callable[..., Path]) -> None:
    run = make_run({"ascend/NONE/stock": [[98.2, 96.3, 89.9], [98.2, 96.3, 89.9]]})
    comp = judge(load_run(run), load_baseline(PUBLISHED))
    assert not [a for a in ci.annotations(comp) if a.startswith("::error")]


def test_log_output_never_truncates(make_run: Callable[..., Path]) -> None:
    """Regression: in a CI log rich assumed 80 columns and cut cells ("regressi…", "[-2.7,2…")."""
    run = make_run({LONG: [[60.0, 50.0, 40.0], [98.2, 96.3, 89.9]]}, seeds=[2, 0])
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "MTPBENCH_WIDTH", "GITHUB_ACTIONS")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "mtpbench", "compare", str(run), "--baseline", str(PUBLISHED)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 1, out.stderr
    assert "…" not in out.stdout
    assert LONG in out.stdout  # the whole cell name on one line
    comp = judge(load_run(run))
    for x in comp.diagnoses:
        assert finding_message(x) in out.stdout  # every diagnosis whole
    assert "regression" in out.stdout and "FAIL: " in out.stdout and "(exit 1)" in out.stdout
    assert "[95% CI]" in out.stdout  # wide enough for the intervals


def test_terminal_keeps_its_width() -> None:
    c = ci.LogConsole(width=None, force_terminal=True)
    assert c.width != ci.LOG_WIDTH
    assert ci.LogConsole(width=None, force_terminal=False, file=open(os.devnull, "w")).width == ci.LOG_WIDTH


def _mtpbench_lines(text: str) -> list[list[str]]:
    import shlex

    joined = text.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line.startswith("mtpbench "):
            out.append(shlex.split(line.split("||")[0].split(">")[0], comments=True))
    return out


def test_documented_ci_examples_use_real_options() -> None:
    """The example GitHub Actions job and shell gate call commands and options the CLI really has."""
    import typer.main
    import yaml

    root = typer.main.get_command(app)
    job = yaml.safe_load((ROOT / "docs" / "ci" / "github-actions.yml").read_text())
    scripts = [s["run"] for s in job["jobs"]["gate"]["steps"] if "run" in s]
    scripts.append((ROOT / "docs" / "ci" / "gate.sh").read_text())
    calls = [c for s in scripts for c in _mtpbench_lines(s)]
    assert {c[1] for c in calls} >= {"run", "compare", "report", "history"}
    for call in calls:
        cmd = root.commands[call[1]]  # type: ignore[attr-defined]
        known = {o for p in cmd.params for o in getattr(p, "opts", [])}
        for tok in call[2:]:
            if tok.startswith("--"):
                assert tok in known, f"{' '.join(call)}: {tok} is not an option of {call[1]}"
