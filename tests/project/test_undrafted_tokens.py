"""benchmarks/undrafted_tokens.py (issue 38 item 3): a prompt whose engine counts differ from the reference is
explained by a token the request decoded with no draft step (a preempted request resuming), placed at a step
boundary of the reference's walk. On hand-made hits, checked against mtpbench/reference/walk.py's walk."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from mtpbench.reference.walk import walk

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "undrafted_tokens.py"
K = 3


@pytest.fixture(scope="module")
def ut() -> ModuleType:
    spec = importlib.util.spec_from_file_location("undrafted_tokens", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["undrafted_tokens"] = mod
    spec.loader.exec_module(mod)
    return mod


def _hits(generated: int) -> np.ndarray:
    """Starts at an even number of generated tokens accept all k drafts, odd ones none: a shift by one token
    changes every later step."""
    return np.array([[i % 2 == 1] * K for i in range(generated + K)])


def test_no_undrafted_token_is_the_reference_walk(ut: ModuleType) -> None:
    hits = _hits(40)
    assert ut.walk_with_undrafted(hits, 40, K, frozenset()) == walk(hits, 40, K)


def test_an_undrafted_token_shifts_every_later_step(ut: ModuleType) -> None:
    hits = _hits(40)
    shifted = ut.walk_with_undrafted(hits, 40, K, frozenset({1}))
    # Start 0 (after 1 token) rejects, so the walk sits at 2 tokens: all-accepting starts. One undrafted token
    # before step 1 moves it to 3 tokens, a rejecting start, and it alternates from there.
    assert walk(hits, 40, K).accepted[:3] == (0, 3, 3)
    assert shifted.accepted[:3] == (0, 0, 3)


def test_the_engine_counts_of_one_undrafted_token_are_found_and_placed(ut: ModuleType) -> None:
    hits = _hits(40)
    engine = ut.walk_with_undrafted(hits, 40, K, frozenset({1}))
    reference = walk(hits, 40, K)
    count, fits = ut.undrafted_placements(
        hits, 40, K, reference.num_drafts, (engine.num_drafts, engine.accepted_per_pos(K))
    )
    assert count == 1 and (1,) in fits
    # The reference's own counts need none; counts no placement reaches are reported as unexplained.
    assert ut.undrafted_placements(hits, 40, K, reference.num_drafts, (1, (0, 0, 0))) == (0, [])
