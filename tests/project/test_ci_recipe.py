"""Issue 19 item 7: the shipped CI recipe gates the run its job made. It used to run `mtpbench run … ||
true` and gate `$(ls -d runs/*/ | tail -n 1)`: with a mistyped config and an older run in runs/ it printed
PASS and exited 0. The recipe itself is run here, with the real CLI on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.fake_runs import fake_config

ROOT = Path(__file__).resolve().parents[2]
GATE = ROOT / "docs" / "ci" / "gate.sh"
STORED = ROOT / "tests" / "data" / "runs" / "tiny-stock-fault"
CODING5 = ROOT / "tests" / "data" / "tiny-gemma4-mtp-cpu-coding5.yaml"


def _gate(tmp: Path, config: str, baseline: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CONFIG": config,
        "BASELINE": str(baseline),
        "OUT": str(tmp / "runs"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    return subprocess.run(["bash", str(GATE)], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)


def test_a_mistyped_config_with_an_old_passing_run_fails_the_job(tmp_path: Path) -> None:
    shutil.copytree(STORED, tmp_path / "runs" / STORED.name)  # an older run that would pass on its own
    res = _gate(tmp_path, str(tmp_path / "no-such-config.yaml"), CODING5)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "made no run folder" in res.stderr and "PASS" not in res.stdout


def test_the_run_this_job_made_is_the_one_gated(tmp_path: Path) -> None:
    cfg = fake_config(tmp_path, {"b": {}})
    (tmp_path / "runs").mkdir()
    shutil.copytree(STORED, tmp_path / "runs" / "99999999T999999Z-newest-looking")  # sorts last; not ours
    res = _gate(tmp_path, str(cfg), CODING5)
    made = (tmp_path / "mtpbench-run-dir.txt").read_text().strip()
    assert Path(made).parent == tmp_path / "runs" and "newest-looking" not in made
    assert yaml.safe_load((Path(made) / "manifest.json").read_text())["config"]["name"] == "fake"
    # The fake run is not comparable with the tiny baseline (another model): the gate says so, exit 4.
    assert res.returncode == 4, res.stdout + res.stderr
