"""`mtpbench run`'s progress bar for a serving concurrency sweep counts every level's requests (cli/run_cmd.py)."""

from __future__ import annotations

from pathlib import Path

from mtpbench.cli.run_cmd import _prompts_per_cell
from mtpbench.config import load_config

REPO = Path(__file__).resolve().parents[2]


def test_a_sweep_counts_the_requests_of_every_level() -> None:
    sweep = load_config(REPO / "configs" / "tiny-gemma4-mtp-serving-sweep.yaml")
    assert sweep.workload.concurrency == [1, 4, 16]
    assert _prompts_per_cell(sweep, 12) == 48 * 3
    single = load_config(REPO / "configs" / "tiny-gemma4-mtp-serving.yaml")
    assert _prompts_per_cell(single, 12) == 300
