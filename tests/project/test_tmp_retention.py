"""A suite run leaves no passing test's temporary folder behind: the whole suite writes about 20 GB of run
folders and environments there, and pytest keeps the last three sessions' by default, which once filled this
box's disk. pyproject's `tmp_path_retention_policy = "failed"` keeps a failed test's folder only; checked here on
a pytest session of its own under the project's configuration, in a temporary root of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TESTS = """
def test_passes(tmp_path):
    (tmp_path / "run-folder").write_text("kept only if the test failed")


def test_fails(tmp_path):
    (tmp_path / "run-folder").write_text("kept: the test failed")
    assert False
"""


def test_only_a_failed_tests_folder_outlives_the_session(tmp_path: Path) -> None:
    (tmp_path / "test_two.py").write_text(TESTS)
    temproot = tmp_path / "temproot"
    temproot.mkdir()
    env = {**os.environ, "PYTEST_DEBUG_TEMPROOT": str(temproot)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    cmd += ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path / "test_two.py")]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    left = sorted(p.parent.name for p in temproot.rglob("run-folder"))
    assert left == ["test_fails0"], left
