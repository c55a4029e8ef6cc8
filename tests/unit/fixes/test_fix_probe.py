"""The fix preflight's probe (mtpbench/fixes/probe.py), run as `python -m mtpbench.fixes.probe NAME` in a
build's interpreter by `status.preflight`: one JSON line saying what the patch's `check()` would do.

It was a program inside a string (`python -c _PROBE`) until issue 27; its answer is unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtpbench.fixes import probe
from mtpbench.fixes.status import PROBE_MODULE

REPO = Path(__file__).resolve().parents[3]
FIX = "ascend-gemma4-layer-params"


def test_a_patch_without_check_is_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    assert probe.main(["flatten-draft-metadata"]) == 0
    assert json.loads(capsys.readouterr().out) == {"known": False}


def test_the_fix_says_it_would_not_apply_without_vllm_ascend(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "vllm_ascend", None)
    assert probe.main([FIX]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["known"] is True and answer["applies"] is False
    assert answer["detail"].startswith("fix not applied: vllm_ascend is not importable here")


def test_an_unknown_patch_is_an_error_not_an_answer() -> None:
    with pytest.raises(KeyError):
        probe.answer("no-such-patch")


def test_the_probe_runs_with_python_m_as_preflight_runs_it() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", PROBE_MODULE, "graph-replay"], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"known": False}
    bad = subprocess.run([sys.executable, "-m", PROBE_MODULE, "nope"], env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1] == "KeyError: 'nope'"
