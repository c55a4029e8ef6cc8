"""Acceptance from the weights alone: a Gemma4 target and its `gemma4_assistant` drafter replayed in plain
PyTorch + transformers, the way vLLM's `Gemma4Proposer` drafts, with no vLLM import.

For one prompt: the target's greedy continuation (regenerated token by token with its KV cache, continued k
tokens past the stop, because the engine's last step verifies drafts beyond it), one teacher-forced target
pass over prompt + continuation (the final-normed hidden states and the shared K/V of the last non-shared
layer of each attention type: what vLLM hands the drafter), and then every possible draft start's k chained
draft steps at once. What vLLM 0.32 does, read from `vllm/v1/spec_decode/llm_base_proposer.py` (`propose`)
and `gemma4.py`, and mirrored here:

- the first draft step from the last verified position p takes the token after p (the target's bonus token)
  embedded by the target's embedding (scaled by sqrt(backbone hidden)) beside the target's hidden state at p;
  the later steps take the previous draft token and the drafter's own `post_projection` output;
- `constant_draft_positions`: every draft step of a request sits at position p and attends the target's K/V
  of positions 0..p (the rejected tokens' K/V are cut off by `seq_lens -= num_rejected`), sliding layers
  through their window, so each start is one query at p, which is how the masks below are built;
- draft tokens are the drafter's argmax (`use_ordered_embeddings`: over the centroid-selected candidates).

A draft step j from p is accepted iff its token equals the target's greedy token at p + j + 1 (given the
earlier drafts were: a rejected draft ends the step, so teacher-forcing the true tokens into later steps
changes no count). Which starts the engine meets is mtpbench/reference/walk.py's.

An EAGLE-3 or EAGLE-1 head (`replay_eagle_prompts`) drafts over the target's auxiliary or final-normed states
with its own chaining and KV cache: mtpbench/reference/eagle.py says how vLLM runs each and computes every
start's k steps at once.

A lookup method (ngram, suffix) has no drafter: `replay_lookup_prompts` regenerates the same greedy text and
walks it with the method's rule (mtpbench/reference/ngram.py's, mtpbench/reference/suffix.py's), the target
teacher-forced once for its margins.

Which pairs are modelled, and how they are loaded, is mtpbench/reference/pair.py's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mtpbench.errors import UserError
from mtpbench.reference.deepseek_mtp import deepseek_draft_logits
from mtpbench.reference.pair import DEEPSEEK_TYPE, Pair
from mtpbench.reference.walk import LookupProcess, LookupRule, Walk, walk

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class PromptReplay:
    """One prompt replayed: the target's greedy text and the draft steps the weights say the engine takes."""

    num_prompt_tokens: int
    num_generated_tokens: int
    finish_reason: str  # "length" or "stop", as vLLM says it
    output_sha256: str  # sha256 of json.dumps(generated token ids): the engine records the same hash
    walk: Walk
    # Smallest top-1 minus top-2 logit gap of the target over the generated tokens, and of the drafter over
    # the draft decisions the walk compared: how close to a tie a greedy choice came (a float-order
    # difference between engine and reference can flip a choice only that close).
    target_margin: float
    draft_margin: float
    # Tokens where the teacher-forced target pass disagrees with the token-by-token regeneration (0: the two
    # orders of float arithmetic agree on every generated token).
    teacher_forced_mismatches: int


def output_sha256(token_ids: Sequence[int]) -> str:
    """The engine's hash of a generated text (engine/worker.py: sha256 of json.dumps of the token ids)."""
    return hashlib.sha256(json.dumps([int(t) for t in token_ids]).encode()).hexdigest()


def prompt_token_ids(pair: Pair, text: str, chat: bool) -> list[int]:
    """The token ids the engine sends for a single-turn prompt: raw text encoded as vLLM encodes it (special
    tokens added), or the chat template rendered as engine/chat.py renders it."""
    if chat:
        from mtpbench.engine.chat import engine_prompt

        return list(engine_prompt(pair.tokenizer, [{"role": "user", "content": text}], "chat")["prompt_token_ids"])
    return list(pair.tokenizer.encode(text, add_special_tokens=True))


def greedy_continuations(pair: Pair, prompts: Sequence[Sequence[int]], length: int, batch: int = 32) -> list[list[int]]:
    """The target's greedy tokens after each prompt, `length` of them, continuing through stop tokens.

    Prompts go `batch` at a time, left-padded (the padding masked out, positions counted from each prompt's
    first token), as an engine batches them; the caller checks the text against the engine's hash.
    """
    out: list[list[int]] = []
    for i in range(0, len(prompts), batch):
        out.extend(_greedy_batch(pair, prompts[i : i + batch], length))
    return out


def _greedy_batch(pair: Pair, prompts: Sequence[Sequence[int]], length: int) -> list[list[int]]:
    import torch
    from transformers import DynamicCache

    width = max(len(p) for p in prompts)
    pad = 0
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long, device=pair.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long, device=pair.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=pair.text.config)
    tokens: list[torch.Tensor] = []
    with torch.no_grad():
        hidden = pair.text(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        ).last_hidden_state
        for _ in range(length):
            token = pair.head(hidden[:, -1]).argmax(-1)
            tokens.append(token)
            if len(tokens) == length:
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            positions = positions[:, -1:] + 1
            hidden = pair.text(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            ).last_hidden_state
    return torch.stack(tokens, dim=1).cpu().tolist()


def stop_ids(pair: Pair, ignore_eos: bool) -> frozenset[int]:
    """The tokens that end a request: the pair's end-of-sequence ids, or none under `ignore_eos` (vLLM 0.32's
    `SamplingParams.update_from_generation_config` then sets no eos_token_id and adds none of the generation
    config's to stop_token_ids, so `check_stop` stops at max_tokens or the model length only)."""
    return frozenset() if ignore_eos else pair.stop_ids


def stop_index(stops: frozenset[int], continuation: Sequence[int], max_tokens: int, room: int) -> tuple[int, str]:
    """How many tokens the engine generates (its stop included) and vLLM's finish reason: `check_stop` looks
    at each token as it is appended, the stop token first, then max_tokens and the model length."""
    limit = min(max_tokens, room)
    for i, t in enumerate(continuation[:limit]):
        if t in stops:
            return i + 1, "stop"
    return limit, "length"


def _masks(queries: torch.Tensor, keys: int, window: int | None, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Additive [1, 1, Q, K] masks: query at position q sees keys 0..q (full) and q-window+1..q (sliding)."""
    import torch

    k = torch.arange(keys, device=queries.device)
    q = queries.unsqueeze(1)
    full = k.unsqueeze(0) <= q
    sliding = full & (q - k.unsqueeze(0) < window) if window else full
    neg = torch.finfo(dtype).min
    zero = torch.zeros((), dtype=dtype, device=queries.device)

    def additive(ok: torch.Tensor) -> torch.Tensor:
        return torch.where(ok, zero, torch.tensor(neg, dtype=dtype, device=queries.device))[None, None]

    return {"full_attention": additive(full), "sliding_attention": additive(sliding)}


def draft_logits(pair: Pair, ids: torch.Tensor, starts: torch.Tensor, k: int) -> list[torch.Tensor]:
    """Drafter logits of steps 1..k from each start position (one query per start, as vLLM drafts).

    `ids` is [1, L]: prompt + continuation. Entry s of step j predicts the token at starts[s] + j + 1.
    A DeepSeek pair drafts by its own chaining (mtpbench/reference/deepseek_mtp.py).
    """
    import torch

    if pair.info.target_type == DEEPSEEK_TYPE:
        return deepseek_draft_logits(pair, ids, starts, k)

    with torch.no_grad():
        out = pair.text(input_ids=ids, return_shared_kv_states=True)
        hidden = out.last_hidden_state
        shared = {kind: (kv[0], kv[1]) for kind, kv in out.shared_kv_states.items()}
        keys = int(starts.max()) + 1
        # A start's query may only see keys at or before it, so K/V past the last start are never read.
        shared = {kind: (kv[0][:, :, :keys], kv[1][:, :, :keys]) for kind, kv in shared.items()}
        text_cfg = pair.assistant.config.get_text_config()
        masks = _masks(starts, keys, getattr(text_cfg, "sliding_window", None), hidden.dtype)
        positions = starts.unsqueeze(0)
        embed = pair.text.embed_tokens  # the target's: it already scales by sqrt(backbone hidden)
        backbone = hidden[:, starts]
        steps: list[torch.Tensor] = []
        tokens = ids[:, starts + 1]
        for j in range(1, k + 1):
            x = pair.assistant.pre_projection(torch.cat([embed(tokens), backbone], dim=-1))
            state = pair.assistant.model(
                inputs_embeds=x, position_ids=positions, attention_mask=dict(masks), shared_kv_states=dict(shared)
            ).last_hidden_state
            if pair.assistant.config.use_ordered_embeddings:
                logits = pair.assistant.masked_embedding(state, pair.assistant.lm_head.weight)
            else:
                logits = pair.assistant.lm_head(state)
            steps.append(logits[0])
            backbone = pair.assistant.post_projection(state)
            # Teacher-forced: the true next token stands for the previous draft (see the module docstring).
            tokens = ids[:, torch.clamp(starts + j + 1, max=ids.shape[1] - 1)]
        target_logits = pair.head(hidden[0])
    return [*steps, target_logits]


def _margin(logits: torch.Tensor) -> torch.Tensor:
    top = logits.float().topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def replay_prompts(
    pair: Pair,
    prompts: Sequence[Sequence[int]],
    k: int,
    max_tokens: int,
    max_model_len: int | None = None,
    batch: int = 32,
    *,
    ignore_eos: bool = False,
) -> Iterator[PromptReplay]:
    """Every prompt replayed, in order: regenerated in batches, then teacher-forced and drafted one by one.
    `ignore_eos`: the run's sampling parameter (the engine then runs past end-of-sequence to max_tokens)."""

    def one(prompt: Sequence[int], text: Sequence[int], room: int) -> PromptReplay:
        return replay_prompt(pair, prompt, text, k, max_tokens, room, max_model_len, ignore_eos=ignore_eos)

    return replay_batches(pair, prompts, k, max_tokens, max_model_len, batch, one)


def replay_batches(
    pair: Pair,
    prompts: Sequence[Sequence[int]],
    k: int,
    max_tokens: int,
    max_model_len: int | None,
    batch: int,
    one: Callable[[Sequence[int], Sequence[int], int], PromptReplay],
) -> Iterator[PromptReplay]:
    """Every prompt replayed, in order, by `one(prompt, text, room)`: the target's greedy text regenerated in
    batches of `batch`, then each prompt handed on with its text and the room its stop may reach. Every method's
    replay shares this; only `one`, the method's draft rule over one prompt, differs."""
    for i in range(0, len(prompts), batch):
        chunk = prompts[i : i + batch]
        rooms = [_room(len(p), max_tokens, max_model_len) for p in chunk]
        # The engine's last step may verify up to k drafts past its stop: the text must go k tokens further.
        texts = greedy_continuations(pair, chunk, max(min(max_tokens, r) for r in rooms) + k, batch)
        for prompt, room, text in zip(chunk, rooms, texts, strict=True):
            yield one(prompt, text, room)


def _room(prompt_tokens: int, max_tokens: int, max_model_len: int | None) -> int:
    room = (max_model_len - prompt_tokens) if max_model_len else max_tokens
    if room < 1:
        raise UserError(f"a prompt of {prompt_tokens} tokens leaves no room under max_model_len {max_model_len}")
    return room


def prompt_replay(
    target_logits: torch.Tensor,
    prompt_len: int,
    n: int,
    reason: str,
    generated: Sequence[int],
    w: Walk,
    draft_margin: float,
) -> PromptReplay:
    """One prompt's record, every method alike: the target's teacher-forced logits over prompt + text (row t
    predicts token t + 1) held against the `n` regenerated tokens `generated`, for its mismatches and margin."""
    p = prompt_len
    window = target_logits[p - 1 : p - 1 + n]
    forced = window.argmax(-1).cpu().tolist()
    mismatches = sum(1 for a, b in zip(forced, generated, strict=True) if a != b)
    target_margin = float(_margin(window).min())
    return PromptReplay(p, n, reason, output_sha256(generated), w, target_margin, draft_margin, mismatches)


def _step_hits(steps: Sequence[torch.Tensor], starts: torch.Tensor, truth: torch.Tensor) -> np.ndarray:
    """hits[i, j]: whether draft step j's argmax from start i (drafting from position starts[i]) equals the
    true token at starts[i] + j + 2 (clamped to the text's end: the walk never counts a draft past it)."""
    import torch

    last = len(truth) - 1
    return np.stack(
        [
            (step.argmax(-1) == truth[torch.clamp(starts + j + 2, max=last)]).cpu().numpy()
            for j, step in enumerate(steps)
        ],
        axis=1,
    )


def replay_prompt(
    pair: Pair,
    prompt: Sequence[int],
    continuation: Sequence[int],
    k: int,
    max_tokens: int,
    room: int,
    max_model_len: int | None = None,
    *,
    ignore_eos: bool = False,
) -> PromptReplay:
    """One prompt: its greedy `continuation` (at least its stop + k tokens), teacher-forced, drafted from
    every start, and walked through the engine's steps."""
    import torch

    p = len(prompt)
    n, reason = stop_index(stop_ids(pair, ignore_eos), continuation, max_tokens, room)
    continuation = list(continuation[: n + k])
    ids = torch.tensor([[*prompt, *continuation]], dtype=torch.long, device=pair.device)
    # Start i (after i + 1 generated tokens) drafts from position p - 1 + i; starts exist up to n - 1.
    starts = torch.arange(p - 1, p - 1 + max(n - 1, 1), device=pair.device)
    logits = draft_logits(pair, ids, starts, k)
    w = walk(_step_hits(logits[:-1], starts, ids[0]), n, k, p, max_model_len)
    return prompt_replay(logits[-1], p, n, reason, continuation[:n], w, _draft_margin(logits[:-1], w))


def _draft_margin(steps: list[torch.Tensor], w: Walk) -> float:
    """The smallest drafter gap among the decisions the walk compared (each step's drafts up to its first miss)."""
    gaps = [_margin(s) for s in steps]
    n, out = 1, float("inf")
    for drafted, accepted in zip(w.drafted, w.accepted, strict=True):
        for j in range(min(accepted + 1, drafted)):
            out = min(out, float(gaps[j][n - 1]))
        n += accepted + 1
    return out


def replay_lookup_prompts(
    pair: Pair,
    prompts: Sequence[Sequence[int]],
    k: int,
    max_tokens: int,
    rule: LookupRule,
    max_model_len: int | None = None,
    batch: int = 32,
    *,
    ignore_eos: bool = False,
) -> Iterator[PromptReplay]:
    """Every prompt of a lookup method's run replayed, in order: the target's greedy text regenerated in
    batches, then walked with the lookup's drafts (`rule`: the n-gram's bounds, the suffix tree's settings)."""

    # One replay of the prompt list is one engine process: a rule with state across requests starts empty.
    process = rule.fresh()

    def one(prompt: Sequence[int], text: Sequence[int], room: int) -> PromptReplay:
        return _replay_lookup_prompt(pair, prompt, text, k, max_tokens, room, process, max_model_len, ignore_eos)

    return replay_batches(pair, prompts, k, max_tokens, max_model_len, batch, one)


def _replay_lookup_prompt(
    pair: Pair,
    prompt: Sequence[int],
    text: Sequence[int],
    k: int,
    max_tokens: int,
    room: int,
    rule: LookupProcess,
    max_model_len: int | None,
    ignore_eos: bool,
) -> PromptReplay:
    import torch

    p = len(prompt)
    n, reason = stop_index(stop_ids(pair, ignore_eos), text, max_tokens, room)
    continuation = list(text[: n + k])
    w = rule.walk(prompt, continuation, n, k, max_model_len)
    generated = continuation[:n]
    ids = torch.tensor([[*prompt, *generated]], dtype=torch.long, device=pair.device)
    with torch.no_grad():
        target_logits = pair.head(pair.text(input_ids=ids).last_hidden_state[0])
    # A lookup's drafts are copies of earlier tokens, not a model's choices: no draft margin.
    return prompt_replay(target_logits, p, n, reason, generated, w, float("inf"))


def replay_eagle_prompts(
    pair: Pair,
    prompts: Sequence[Sequence[int]],
    k: int,
    max_tokens: int,
    max_model_len: int | None = None,
    batch: int = 32,
    *,
    ignore_eos: bool = False,
) -> Iterator[PromptReplay]:
    """Every prompt of an EAGLE-3 or EAGLE-1 run replayed, in order: regenerated in batches, then teacher-forced
    through the target (the states the head reads) and the head's k chained steps from every start, and walked."""

    def one(prompt: Sequence[int], text: Sequence[int], room: int) -> PromptReplay:
        return replay_eagle_prompt(pair, prompt, text, k, max_tokens, room, max_model_len, ignore_eos=ignore_eos)

    return replay_batches(pair, prompts, k, max_tokens, max_model_len, batch, one)


def replay_eagle_prompt(
    pair: Pair,
    prompt: Sequence[int],
    continuation: Sequence[int],
    k: int,
    max_tokens: int,
    room: int,
    max_model_len: int | None = None,
    *,
    ignore_eos: bool = False,
) -> PromptReplay:
    import torch

    from mtpbench.reference.eagle import chain_logits

    p = len(prompt)
    n, reason = stop_index(stop_ids(pair, ignore_eos), continuation, max_tokens, room)
    continuation = list(continuation[: n + k])
    ids = torch.tensor([[*prompt, *continuation]], dtype=torch.long, device=pair.device)
    head = pair.assistant  # mtpbench/reference/eagle.py's Eagle3Head or Eagle1Head
    with torch.no_grad():
        states, target_logits = head.target_states(pair.target, ids)
        # Only the starts after the prompt draft: from position p - 1 on.
        steps = chain_logits(head, pair.text.embed_tokens, states, ids, k, first=p - 1)
    # Start i (after i + 1 generated tokens) drafts from position p - 1 + i; starts exist up to n - 1.
    starts = torch.arange(p - 1, p - 1 + max(n - 1, 1), device=pair.device)
    steps = [step[0, starts - (p - 1)] for step in steps]
    w = walk(_step_hits(steps, starts, ids[0]), n, k, p, max_model_len)
    return prompt_replay(target_logits[0], p, n, reason, continuation[:n], w, _draft_margin(steps, w))
