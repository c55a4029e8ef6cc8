"""The engine's draft loop as arithmetic: which draft starts a greedy request meets, and what each accepts.

Greedy speculative decoding with k drafts is a deterministic walk over the target's own greedy text. After
the prefill the engine has generated one token; from then on every step drafts from the last verified
position, the target accepts the longest prefix of the drafts equal to its greedy tokens, and the request
moves on by accepted + 1 (the accepted drafts and the target's bonus token). Only those step boundaries are
draft starts, not every position of the text. Where the walk stops is vLLM's (0.32, read from
`vllm/v1/core/sched/scheduler.py` and `sched/utils.py`):

- a request stops after the step that reaches `max_tokens` or emits a stop token; that step's accepted drafts
  are counted in full even when the output is cut at the stop (the counts are taken from the step's sampled
  tokens before the stop check trims them), so a step may accept drafts past the last recorded token;
- drafts for a request that has already stopped are dropped, never verified: no draft start at the end;
- near `max_model_len` the scheduler verifies only `max_model_len - prompt - generated - 1` drafts (it never
  schedules a position past the model length); a step with room for none decodes one token undrafted.

This module knows nothing of models: `hits[i, j]` says whether draft j (0-based) from the i-th possible start
(after i + 1 generated tokens) equals the target's greedy token. mtpbench/reference/weights_replay.py computes the
hits from the weights; tests check the walk by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class Walk:
    """One request's draft steps: drafts verified and drafts accepted per step, in order."""

    drafted: tuple[int, ...]
    accepted: tuple[int, ...]

    @property
    def num_drafts(self) -> int:
        return len(self.drafted)

    @property
    def num_draft_tokens(self) -> int:
        return sum(self.drafted)

    @property
    def num_accepted_tokens(self) -> int:
        return sum(self.accepted)

    def accepted_per_pos(self, k: int) -> tuple[int, ...]:
        """vLLM's per-position counts: position i is accepted in every step that accepted more than i."""
        return tuple(sum(1 for a in self.accepted if a > i) for i in range(k))


class LookupProcess(Protocol):
    """A lookup proposer as one engine process runs it, request after request, in the run's order."""

    def walk(
        self, prompt: Sequence[int], continuation: Sequence[int], generated: int, k: int, max_model_len: int | None
    ) -> Walk:
        """The draft steps of a greedy request whose target text is `continuation` (see ngram_walk)."""
        ...


class LookupRule(Protocol):
    """A lookup method's draft rule (n-gram, suffix): no drafter model, the walk of a request's own tokens."""

    def described(self) -> dict[str, Any]:
        """The rule's settings, as the reference's start line records them."""
        ...

    def fresh(self) -> LookupProcess:
        """The rule as a fresh engine process starts it (a rule with state across requests starts empty)."""
        ...


def lookup_walk(
    continuation: Sequence[int],
    generated: int,
    k: int,
    prompt_tokens: int,
    max_model_len: int | None,
    drafts_after: Callable[[int], Sequence[int]],
) -> Walk:
    """The draft steps of a greedy request drafting by a lookup (n-gram, suffix): `drafts_after(n)` is what the
    proposer drafts once the request holds its prompt and the first n tokens of `continuation` (the target's
    greedy text, at least `generated` + k tokens: the last step may verify drafts past the stop). After the
    prefill's token, every step proposes from the current text; a step with no proposal decodes one token and
    is no draft step (the scheduler counts a draft only when drafts were scheduled); a step with d drafts
    accepts the leading ones equal to the target's tokens and moves on by accepted + 1. n only grows."""
    if len(continuation) < generated:
        raise ValueError(f"continuation has {len(continuation)} tokens; the request generated {generated}")
    drafted: list[int] = []
    accepted: list[int] = []
    n = 1  # the prefill samples the first token; drafting starts from it
    while n < generated:
        if max_model_len is not None and prompt_tokens + n >= max_model_len:
            break
        room = k if max_model_len is None else min(k, max_model_len - prompt_tokens - n - 1)
        drafts = list(drafts_after(n))[: max(room, 0)]
        if not drafts:
            n += 1
            continue
        truth = continuation[n : n + len(drafts)]
        a = 0
        while a < len(drafts) and a < len(truth) and drafts[a] == truth[a]:
            a += 1
        drafted.append(len(drafts))
        accepted.append(a)
        n += a + 1
    return Walk(tuple(drafted), tuple(accepted))


def leading_hits(row: np.ndarray) -> int:
    """How many drafts of one step the target accepts: the length of the leading run of hits."""
    misses = np.flatnonzero(~np.asarray(row, dtype=bool))
    return int(misses[0]) if len(misses) else len(row)


def walk(hits: np.ndarray, generated: int, k: int, prompt_tokens: int = 0, max_model_len: int | None = None) -> Walk:
    """The draft steps of a request that generated `generated` tokens (its stop included).

    `hits` has one row per possible draft start (row i: after i + 1 generated tokens) and k columns; it must
    have a row for every start before `generated`. `prompt_tokens` and `max_model_len` cap the drafts near the
    model length as the scheduler does; without `max_model_len` there is no cap.
    """
    hits = np.asarray(hits, dtype=bool)
    if hits.ndim != 2 or hits.shape[1] < k:
        raise ValueError(f"hits must be (starts, >= {k}), got {hits.shape}")
    drafted: list[int] = []
    accepted: list[int] = []
    n = 1  # the prefill samples the first token; drafting starts from it
    while n < generated:
        room = k if max_model_len is None else min(k, max_model_len - prompt_tokens - n - 1)
        if max_model_len is not None and prompt_tokens + n >= max_model_len:
            break
        if room <= 0:
            n += 1
            continue
        if n - 1 >= len(hits):
            raise ValueError(f"hits has {len(hits)} draft starts; the walk needs start {n - 1}")
        a = leading_hits(hits[n - 1, :room])
        drafted.append(room)
        accepted.append(a)
        n += a + 1
    return Walk(tuple(drafted), tuple(accepted))
