"""The engine's draft loop as arithmetic (mtpbench/reference/walk.py), checked on walks worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from mtpbench.reference.walk import leading_hits, walk

T, F = True, False


def test_leading_hits_stops_at_the_first_miss() -> None:
    assert leading_hits(np.array([T, T, T])) == 3
    assert leading_hits(np.array([T, F, T])) == 1  # a later hit after a miss is never verified
    assert leading_hits(np.array([F, T, T])) == 0


def test_the_walk_starts_only_at_step_boundaries() -> None:
    # 10 tokens. Start 0 accepts 2 (3 tokens: n 1 -> 4), start 3 accepts 0 (n -> 5), start 4 accepts 3
    # (n -> 9), start 8 accepts 1 (n -> 11 >= 10: stop). Starts 1, 2, 5, 6, 7 are never drafted from.
    hits = np.array(
        [
            [T, T, F],
            [F, F, F],  # never a start: its misses must not count
            [F, F, F],
            [F, T, T],
            [T, T, T],
            [F, F, F],
            [F, F, F],
            [F, F, F],
            [T, F, T],
        ]
    )
    w = walk(hits, generated=10, k=3)
    assert w.accepted == (2, 0, 3, 1)
    assert w.drafted == (3, 3, 3, 3)
    assert w.num_drafts == 4 and w.num_draft_tokens == 12 and w.num_accepted_tokens == 6
    # position i accepted in every step that accepted more than i
    assert w.accepted_per_pos(3) == (3, 2, 1)


def test_the_last_step_counts_drafts_past_the_stop() -> None:
    # 3 tokens: after the prefill (n = 1) one step accepting all 3 reaches n = 5 > 3. vLLM counts the three
    # accepted drafts even though the output keeps only 3 tokens.
    w = walk(np.array([[T, T, T], [T, T, T]]), generated=3, k=3)
    assert w.accepted == (3,)
    assert w.accepted_per_pos(3) == (1, 1, 1)


def test_no_draft_after_the_stop_and_none_for_a_single_token() -> None:
    assert walk(np.zeros((0, 3), dtype=bool), generated=1, k=3).num_drafts == 0
    # n reaches exactly the stop: no further draft is verified
    w = walk(np.array([[T, F, F], [F, F, F], [T, T, T]]), generated=2, k=3)
    assert w.accepted == (1,)


def test_near_max_model_len_fewer_drafts_are_verified() -> None:
    # prompt 10, max_model_len 16: at n generated the scheduler verifies min(k, 16 - 10 - n - 1) drafts.
    hits = np.ones((8, 3), dtype=bool)
    w = walk(hits, generated=6, k=3, prompt_tokens=10, max_model_len=16)
    # n=1: room 4 -> 3 drafts, all accepted (n=5); n=5: room 0 -> one undrafted token (n=6): stop.
    assert w.drafted == (3,)
    assert w.accepted == (3,)
    w = walk(hits, generated=5, k=3, prompt_tokens=10, max_model_len=15)
    # n=1: room 3 -> 3 drafts (n=5): stop.
    assert w.drafted == (3,)
    w = walk(hits, generated=5, k=3, prompt_tokens=10, max_model_len=14)
    # n=1: room 2 -> 2 drafts (n=4); n=4: room -1 -> undrafted (n=5).
    assert w.drafted == (2,) and w.accepted == (2,)


def test_a_walk_needs_a_row_for_every_start() -> None:
    with pytest.raises(ValueError, match="start 1"):
        walk(np.array([[F, F, F]]), generated=5, k=3)
