"""Suffix decoding's draft rule (mtpbench/reference/suffix.py) on hand-made token sequences, the walk a greedy
request takes with it, arctic-inference's own suffix tree held against it on random texts (the library vLLM's
`SuffixDecodingProposer` calls, installed by `make test`'s `suffix` extra), and the one-line refusals of
settings the reference cannot replay."""

from __future__ import annotations

import random

import pytest

from mtpbench.errors import UserError
from mtpbench.fixtures import TINY_GEMMA4_TARGET_DIR
from mtpbench.reference.compute import lookup_rule
from mtpbench.reference.pair import check_pair
from mtpbench.reference.suffix import SuffixParams, SuffixTree, propose, suffix_params, suffix_walk

OWN = SuffixParams(max_cached_requests=0)


def tree_of(tokens: list[int], depth: int = 24) -> SuffixTree:
    tree = SuffixTree(depth)
    tree.extend(tokens)
    return tree


def test_the_draft_follows_the_most_frequent_continuation() -> None:
    # [1, 2] occurs four times (the text's end included): 3 follows twice (p 0.5), 4 once; [1, 2, 3] is then
    # followed by 9 and 8 once each (p 0.25, the older child first). A two-token match allows two tokens.
    tokens = [1, 2, 3, 9, 1, 2, 3, 8, 1, 2, 4, 7, 1, 2]
    assert propose(tree_of(tokens), tokens, 3, OWN, None) == [3, 9]


def test_the_budget_is_the_match_length_times_the_factor() -> None:
    # Only a one-token match ([7] -> 8) exists for the text's end: a factor of 1 allows one draft token.
    tokens = [7, 8, 9, 9, 7]
    assert propose(tree_of(tokens), tokens, 3, OWN, None) == [8]
    assert propose(tree_of(tokens), tokens, 3, SuffixParams(24, 2.0, 0.1, 0), None) == [8, 9]


def test_an_unlikely_continuation_is_not_drafted() -> None:
    # [1] is followed by 2, 3, 4, 5 once each and ends the text once: every continuation has probability 1/5.
    tokens = [1, 2, 1, 3, 1, 4, 1, 5, 1]
    assert propose(tree_of(tokens), tokens, 3, OWN, None) == [2]  # 0.2 >= 0.1: the first child is drafted
    assert propose(tree_of(tokens), tokens, 3, SuffixParams(24, 1.0, 0.25, 0), None) == []


def test_equal_counts_keep_the_trees_history_not_token_order() -> None:
    # [5] is followed by 3 twice, then by 7 twice, and only a one-token match reaches the text's end: 7 reached
    # count 2 last, and a child whose count grows to its left neighbour's moves in front of it. Sorting by
    # count with the token id or the first appearance as a tie-break would say 3; arctic-inference says 7.
    tokens = [5, 3, 1, 5, 3, 2, 5, 7, 8, 5, 7, 4, 6, 5]
    assert propose(tree_of(tokens), tokens, 1, OWN, None) == [7]
    # Once 3 follows a third time it leads.
    more = [*tokens, 3, 0, 5]
    assert propose(tree_of(more), more, 1, OWN, None) == [3]


def test_the_model_length_cuts_the_draft() -> None:
    tokens = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    assert propose(tree_of(tokens), tokens, 3, OWN, None) == [3, 4, 1]
    assert propose(tree_of(tokens), tokens, 3, OWN, 12) == [3]  # min(k, 12 - 10 - 1)
    assert propose(tree_of(tokens), tokens, 3, OWN, 10) == []


def test_the_walk_drafts_from_the_prompt_and_the_output_so_far() -> None:
    prompt = [1, 2, 3, 1, 2, 3, 1]
    continuation = [2, 3, 1, 2, 7, 7, 7, 7, 7]
    w = suffix_walk(prompt, continuation, 6, 3, OWN, None)
    # After [.., 1, 2] the tree proposes [3, 1, 2] (right); after [.., 2, 3, 1, 2, 7]... a one-token match
    # [7] has no continuation yet: no draft, one token decoded undrafted; then [7] -> 7 once.
    assert w.drafted[0] == 3 and w.accepted[0] == 3
    assert w.num_drafts == len(w.accepted)
    assert sum(w.accepted) + len([d for d in w.drafted]) <= 6 + 3


def test_the_rule_equals_arctic_inferences_suffix_tree_on_random_texts() -> None:
    np = pytest.importorskip("numpy")
    from arctic_inference.suffix_decoding import SuffixDecodingCache

    rng = random.Random(0)
    checked = 0
    for trial in range(120):
        vocab = rng.choice([2, 3, 5, 20])
        depth = rng.choice([3, 5, 24])
        params = SuffixParams(depth, rng.choice([1.0, 0.5, 2.0]), rng.choice([0.1, 0.0, 0.3]), 0)
        k = rng.choice([1, 3, 5])
        n = rng.randint(2, 600)
        text = [rng.randrange(vocab) for _ in range(n)]
        start = rng.randint(1, n - 1)
        cache = SuffixDecodingCache(max_tree_depth=depth, max_cached_requests=0)
        cache.start_request(trial, np.array(text[:start], dtype=np.int32))
        tree = tree_of(text[:start], depth)
        i = start
        while i < n:
            chunk = text[i : i + rng.randint(1, 4)]
            i += len(chunk)
            cache.add_active_response(trial, chunk)
            tree.extend(chunk)
            context = np.array(text[max(0, i - depth) : i], dtype=np.int32)
            theirs = cache.speculate(
                trial,
                context,
                max_spec_tokens=k,
                max_spec_factor=params.max_spec_factor,
                min_token_prob=params.min_token_prob,
            )
            assert propose(tree, text[:i], k, params, None) == list(theirs.token_ids), (trial, i)
            checked += 1
    assert checked > 5000


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"suffix_decoding_max_tree_depth": 0}, "max_tree_depth: 0"),
        ({"suffix_decoding_min_token_prob": 2.0}, "is not in [0, 1]"),
        ({"suffix_decoding_max_cached_requests": -1}, "max_cached_requests: -1"),
        ({"suffix_decoding_max_spec_factor": float("nan")}, "max_spec_factor: nan is not what vLLM takes"),
        ({"suffix_decoding_min_token_prob": True}, "min_token_prob: True is not what vLLM takes"),
    ],
)
def test_settings_vllm_would_refuse_are_one_line(extra: dict[str, object], needle: str) -> None:
    with pytest.raises(UserError) as err:
        suffix_params(extra)
    assert needle in str(err.value) and "\n" not in str(err.value)


def _library_walks(
    requests: list[tuple[list[int], list[int], int]], k: int, params: SuffixParams
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """arctic-inference's own cache driven as vLLM 0.32's `SuffixDecodingProposer.propose` drives it for an
    engine serving `requests` one at a time (suffix_decoding.py lines 50-96): the first step starts the request
    with its prompt, every step adds its sampled tokens and speculates (the last step's draft is dropped), and a
    request no longer in the batch is stopped; its output stays in the global tree."""
    np = pytest.importorskip("numpy")
    from arctic_inference.suffix_decoding import SuffixDecodingCache

    cache = SuffixDecodingCache(max_tree_depth=params.max_tree_depth, max_cached_requests=params.max_cached_requests)
    out = []
    for r, (prompt, continuation, generated) in enumerate(requests):
        drafted: list[int] = []
        accepted: list[int] = []
        n, step = 1, continuation[:1]
        cache.start_request(r, np.array(prompt, dtype=np.int32))
        for old in list(cache.active_requests):
            if old != r:
                cache.stop_request(old)
        while True:
            cache.add_active_response(r, step)
            text = [*prompt, *continuation[:n]]
            draft = cache.speculate(
                r,
                np.array(text[-params.max_tree_depth :], dtype=np.int32),
                max_spec_tokens=k,
                max_spec_factor=params.max_spec_factor,
                min_token_prob=params.min_token_prob,
            )
            if n >= generated:
                break
            drafts = list(draft.token_ids)
            if not drafts:
                step, n = continuation[n : n + 1], n + 1
                continue
            a = 0
            while a < len(drafts) and drafts[a] == continuation[n + a]:
                a += 1
            drafted.append(len(drafts))
            accepted.append(a)
            step, n = continuation[n : n + a + 1], n + a + 1
        out.append((tuple(drafted), tuple(accepted)))
    return out


@pytest.mark.parametrize("cached", [0, 10000])
def test_a_process_serving_requests_in_turn_equals_arctic_inferences_cache(cached: int) -> None:
    # With the cross-request cache on (vLLM's default), each request also drafts from the outputs of those the
    # process served before it, whole (the last step's overshoot included), and its own so far.
    rng = random.Random(cached)
    checked = 0
    for trial in range(30):
        params = SuffixParams(rng.choice([4, 24]), rng.choice([1.0, 2.0]), rng.choice([0.1, 0.3]), cached)
        k = rng.choice([1, 3, 5])
        vocab = rng.choice([3, 6])
        requests = []
        for _ in range(rng.randint(1, 6)):
            prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 30))]
            generated = rng.randint(1, 60)
            continuation = [rng.randrange(vocab) for _ in range(generated + k)]
            requests.append((prompt, continuation, generated))
        process = params.fresh()
        mine = [(w.drafted, w.accepted) for w in (process.walk(p, c, g, k, None) for p, c, g in requests)]
        assert mine == _library_walks(requests, k, params), trial
        checked += sum(len(d) for d, _ in mine)
    assert checked > 300


def test_the_rule_reads_the_runs_settings_with_vllms_defaults() -> None:
    assert lookup_rule("suffix", {"suffix_decoding_max_cached_requests": 0}) == SuffixParams(24, 1.0, 0.1, 0)
    assert lookup_rule("eagle3", {}) is None


def test_suffix_needs_no_drafter() -> None:
    info = check_pair(TINY_GEMMA4_TARGET_DIR, None, "suffix")
    assert info.drafter is None and info.method == "suffix"
