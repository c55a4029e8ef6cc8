"""The selftest's reference check (cli/selftest.py `evaluate_reference`, issue 29) on constructed runs: it
passes only if stock counts exactly what the weights say and the fault falls below the reference in each
group order (hash seed) on its own, with no baseline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mtpbench.cli.selftest import SELFTEST_SEEDS, evaluate_reference
from mtpbench.judge.evidence import collect
from mtpbench.judge.signals.reference_comparison import hold
from mtpbench.store.reference_records import read_reference
from mtpbench.store.results import load_run
from tests.support.reference_runs import GOOD, WORSE, per_prompt, write_reference

STOCK, FAULT = "cpu/eager/stock", "cpu/eager/fault"


def _evaluate(
    make_run: Callable[..., Path], stock: list[tuple[int, list[int]]], fault: list[tuple[int, list[int]]]
) -> tuple[bool, list[str]]:
    run = make_run(
        {STOCK: [[0.0]] * 2, FAULT: [[0.0]] * 2},
        per_prompt={STOCK: per_prompt(*stock), FAULT: per_prompt(*fault)},
        seeds=list(SELFTEST_SEEDS),
        baseline=None,
    )
    write_reference(run, [STOCK, FAULT])
    r = load_run(run)
    ref = read_reference(run)
    assert ref is not None
    return evaluate_reference(hold(r.run_id, collect(r), ref, 3))


def test_passes_when_stock_matches_and_the_fault_is_below_in_both_orders(make_run: Callable[..., Path]) -> None:
    ok, lines = _evaluate(make_run, [GOOD, GOOD], [WORSE, WORSE])
    assert ok, lines
    assert f"[ok] stock {STOCK}: 10 of 10 prompt observations count exactly what the weights say" in lines[0]
    assert "in each group order on its own (PYTHONHASHSEED 0, 1)" in lines[1]


def test_fails_when_the_fault_is_below_in_one_order_only(make_run: Callable[..., Path]) -> None:
    ok, lines = _evaluate(make_run, [GOOD, GOOD], [GOOD, WORSE])
    assert not ok
    assert lines[1].startswith(f"[FAIL] fault {FAULT}") and "(PYTHONHASHSEED 1)" in lines[1]


def test_fails_when_stock_does_not_count_what_the_weights_say(make_run: Callable[..., Path]) -> None:
    ok, lines = _evaluate(make_run, [GOOD, WORSE], [WORSE, WORSE])
    assert not ok
    assert lines[0].startswith(f"[FAIL] stock {STOCK}: 5 of 10")
