"""The n-gram draft rule (mtpbench/reference/ngram.py) on hand-made token sequences, the walk a greedy request
takes with it, vLLM's own lookup held against it on random texts, and the one-line refusal of a method the
reference does not model."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from mtpbench.errors import UserError
from mtpbench.fixtures import TINY_GEMMA4_TARGET_DIR
from mtpbench.reference.ngram import lookup_bounds, ngram_walk, propose
from mtpbench.reference.pair import check_pair


def test_the_draft_follows_the_earliest_occurrence_of_the_matched_suffix() -> None:
    # Suffix [1, 2, 3] occurs at 0 (followed by 9) and at 4 (followed by 7): vLLM takes the earliest.
    tokens = [1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3]
    assert propose(tokens, 2, 3, 3) == [9, 1, 2]


def test_a_longer_match_wins_over_an_earlier_shorter_one() -> None:
    # [5, 3] occurs first at 0 (-> 8), but [6, 5, 3] occurs at 3 (-> 4): the longest n wins.
    tokens = [5, 3, 8, 6, 5, 3, 4, 6, 5, 3]
    assert propose(tokens, 2, 3, 3) == [4, 6, 5]
    # With max n 2 only the two-token suffix counts, and its earliest occurrence is at 0.
    assert propose(tokens, 2, 2, 3) == [8, 6, 5]


def test_no_match_of_the_minimum_length_drafts_nothing() -> None:
    tokens = [1, 2, 3, 4, 5, 9, 5]  # only the one-token suffix [5] recurs
    assert propose(tokens, 2, 4, 3) == []
    assert propose(tokens, 1, 4, 3) == [9, 5]  # n = 1 matches at 4; the draft stops at the text's end
    assert propose([7], 2, 4, 3) == []  # shorter than the minimum n


def test_drafts_are_cut_at_the_end_of_the_text_and_at_the_model_length() -> None:
    tokens = [1, 2, 1, 2]  # [1, 2] at 0: the draft is what follows, only two tokens remain
    assert propose(tokens, 2, 3, 3) == [1, 2]
    long = [1, 2, 3, 4, 5, 6, 1, 2]
    assert propose(long, 2, 2, 3) == [3, 4, 5]
    assert propose(long, 2, 2, 3, max_model_len=10) == [3, 4]  # k cut to max_model_len - len
    assert propose(long, 2, 2, 3, max_model_len=8) == []


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"prompt_lookup_min": "two"}, "prompt_lookup_min: 'two' is not a lookup length"),
        ({"prompt_lookup_min": 2, "prompt_lookup_max": 0}, "prompt_lookup_max: 0 is not a lookup length"),
        ({"prompt_lookup_min": 6, "prompt_lookup_max": 2}, "prompt_lookup_min 6 is larger than prompt_lookup_max 2"),
    ],
)
def test_lookup_bounds_a_hand_edited_manifest_cannot_hold_are_one_line(extra: dict[str, object], needle: str) -> None:
    # The reference reads them from the run's manifest before the config is validated again: a value vLLM
    # would have refused was a ValueError (an unexpected error) or a lookup that never drafts.
    with pytest.raises(UserError, match=needle):
        lookup_bounds(extra)


def test_lookup_bounds_follow_vllms_defaults_and_one_bound_stands_for_both() -> None:
    assert lookup_bounds({}) == (5, 5)
    assert lookup_bounds({"prompt_lookup_max": 4}) == (4, 4)
    assert lookup_bounds({"prompt_lookup_min": 3}) == (3, 3)
    assert lookup_bounds({"prompt_lookup_min": 2, "prompt_lookup_max": 5}) == (2, 5)


def test_the_walk_drafts_only_where_the_lookup_proposes_and_accepts_the_leading_hits() -> None:
    prompt = [7, 1, 2, 3, 4, 8, 1, 2]
    continuation = [3, 4, 8, 1, 2, 5, 6, 7, 0, 0, 0]
    w = ngram_walk(prompt, continuation, 8, 3, 2, 2)
    # After [3]: suffix [2, 3] at 2 -> [4, 8, 1], all three right. After [.., 1, 2]: suffix [1, 2], earliest
    # at 1 -> [3, 4, 8] against [5, 6, 7]: none right. From then on no two-token suffix recurs: no drafts.
    assert w.drafted == (3, 3)
    assert w.accepted == (3, 0)
    assert w.accepted_per_pos(3) == (1, 1, 1)


def test_the_walk_verifies_no_draft_after_the_last_generated_token() -> None:
    prompt = [1, 2, 1, 2, 1]
    continuation = [2, 1, 2, 1, 2, 1, 2, 1]
    # Every step drafts [1, 2, 1] and is right: 1 + 4 = 5 tokens, the request stops there (5 generated).
    assert ngram_walk(prompt, continuation, 5, 3, 2, 2).accepted == (3,)
    # One token more: a second step, whose three drafts are checked (and counted) past the sixth token.
    assert ngram_walk(prompt, continuation, 6, 3, 2, 2).accepted == (3, 3)


@pytest.mark.slow
def test_the_rule_equals_vllms_own_lookup_on_random_texts() -> None:
    np = pytest.importorskip("numpy")
    upstream = pytest.importorskip("vllm.v1.spec_decode.ngram_proposer")
    rng = random.Random(0)
    for _ in range(2000):
        n = rng.randint(1, 40)
        tokens = [rng.randrange(rng.randint(2, 4)) for _ in range(n)]
        lo = rng.randint(1, 4)
        hi = rng.randint(lo, 6)
        k = rng.randint(1, 5)
        mml = n + rng.randint(0, 6)
        theirs = upstream._find_longest_matched_ngram_and_propose_tokens(
            np.array(tokens, dtype=np.int32), lo, hi, mml, k
        )
        assert propose(tokens, lo, hi, k, mml) == theirs.tolist(), (tokens, lo, hi, k, mml)


def test_a_method_the_reference_does_not_model_is_refused_in_one_line() -> None:
    # eagle3 and eagle are modelled since issue 38's EAGLE work; Medusa is not.
    with pytest.raises(UserError, match="speculative method 'medusa'") as err:
        check_pair(TINY_GEMMA4_TARGET_DIR, "/models/medusa-head", "medusa")
    assert "\n" not in str(err.value)


def test_ngram_needs_no_drafter_but_a_target_the_reference_models(tmp_path: Path) -> None:
    info = check_pair(TINY_GEMMA4_TARGET_DIR, None, "ngram")
    assert info.drafter is None
    assert info.method == "ngram"
    # Llama targets load too since the EAGLE-3 work (issue 38); a family the reference cannot load is refused.
    qwen = tmp_path / "qwen"
    qwen.mkdir()
    (qwen / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}))
    with pytest.raises(UserError, match="this target is Qwen3ForCausalLM"):
        check_pair(qwen, None, "ngram")
