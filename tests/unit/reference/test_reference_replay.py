"""The replay on the embedded pair (mtpbench/reference/weights_replay.py) against a naive engine written from
vLLM's proposer loop step by step: the target re-run in full at every step, the drafter chained on its own
draft tokens (not teacher-forced) through transformers' own `Gemma4AssistantForCausalLM.forward` (its own
masks, one query at the last verified position), the target accepting the longest prefix of its greedy
tokens. And the one-line refusals for pairs the reference does not model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mtpbench.errors import UserError  # noqa: E402
from mtpbench.fixtures import TINY_GEMMA4_ASSISTANT_DIR, TINY_GEMMA4_TARGET_DIR  # noqa: E402
from mtpbench.reference.pair import Pair, check_pair, load_pair  # noqa: E402
from mtpbench.reference.weights_replay import (  # noqa: E402
    draft_logits,
    greedy_continuations,
    output_sha256,
    prompt_token_ids,
    replay_prompts,
)
from mtpbench.training import drafting  # noqa: E402

K = 3
# Longer than the pair's sliding window (64 tokens), so the drafter's sliding layers must drop old keys.
PROMPT = (
    "import os\nimport sys\n\n\ndef read_lines(path):\n"
    '    """Return the lines of the file at path, without their newline characters."""\n'
    "    with open(path) as fh:\n"
)


@pytest.fixture(scope="module")
def pair() -> Pair:
    torch.manual_seed(0)
    return load_pair(check_pair(TINY_GEMMA4_TARGET_DIR, TINY_GEMMA4_ASSISTANT_DIR))


def _naive_engine(pair: Pair, prompt: Sequence[int], max_tokens: int) -> tuple[list[int], list[int]]:
    """Generated tokens and accepted drafts per step, the slow and obvious way."""
    text = pair.text

    def target(seq: list[int]) -> Any:
        return text(input_ids=torch.tensor([seq]), return_shared_kv_states=True)

    with torch.no_grad():
        seq = list(prompt)
        out = target(seq)
        generated = [int(pair.head(out.last_hidden_state[0, -1]).argmax())]
        steps: list[int] = []
        while len(generated) < max_tokens and generated[-1] not in pair.stop_ids:
            verified = seq + generated[:-1]  # every token the target has processed
            p = len(verified) - 1
            feats = target(verified)
            shared = {kind: (kv[0][:, :, : p + 1], kv[1][:, :, : p + 1]) for kind, kv in feats.shared_kv_states.items()}
            backbone = feats.last_hidden_state[:, p : p + 1]
            token = generated[-1]
            drafts: list[int] = []
            for _ in range(K):
                emb = text.embed_tokens(torch.tensor([[token]]))
                res = pair.assistant(
                    inputs_embeds=torch.cat([emb, backbone], dim=-1),
                    position_ids=torch.tensor([[p]]),
                    shared_kv_states=shared,
                )
                token = int(res.logits[0, -1].argmax())
                drafts.append(token)
                backbone = res.last_hidden_state
            check = target(seq + generated + drafts)
            greedy = pair.head(check.last_hidden_state[0]).argmax(-1).tolist()
            base = len(seq) + len(generated) - 1  # the greedy token after the bonus token
            accepted = 0
            while accepted < K and drafts[accepted] == greedy[base + accepted]:
                accepted += 1
            steps.append(accepted)
            new = [*drafts[:accepted], greedy[base + accepted]]
            for t in new:  # the stop check trims the output, never the counts
                if len(generated) < max_tokens and generated[-1] not in pair.stop_ids:
                    generated.append(t)
    return generated, steps


def test_replay_equals_a_naive_engine_on_the_embedded_pair(pair: Pair) -> None:
    prompt = prompt_token_ids(pair, PROMPT, chat=False)
    assert len(prompt) > 64
    max_tokens = 40
    generated, steps = _naive_engine(pair, prompt, max_tokens)
    (rep,) = replay_prompts(pair, [prompt], K, max_tokens, max_model_len=1024)
    assert rep.num_generated_tokens == len(generated)
    assert rep.output_sha256 == output_sha256(generated)
    assert list(rep.walk.accepted) == steps
    assert rep.teacher_forced_mismatches == 0
    # the case must exercise both acceptance and rejection to mean something
    assert 0 < sum(steps) < K * len(steps)


def test_one_query_drafting_equals_the_trainers_draft_chain(pair: Pair) -> None:
    # draft_chain (mtpbench/training/drafting.py) drafts from every position with square causal masks; the
    # replay drafts one query per start with masks of its own: the logits must agree where both draft.
    prompt = prompt_token_ids(pair, PROMPT, chat=False)
    (cont,) = greedy_continuations(pair, [prompt], 20)
    ids = torch.tensor([prompt + cont])
    starts = torch.arange(len(prompt) - 1, ids.shape[1] - K - 1)
    with torch.no_grad():
        feats = drafting.target_features(pair.target, ids)
        chain = drafting.draft_chain(pair.target, pair.assistant, ids, feats, K)
    mine = draft_logits(pair, ids, starts, K)
    for j in range(K):
        torch.testing.assert_close(mine[j], chain[j][0, starts], rtol=1e-4, atol=1e-4)


def test_batched_regeneration_equals_one_prompt_at_a_time(pair: Pair) -> None:
    prompts = [
        prompt_token_ids(pair, t, chat=False) for t in (PROMPT, "def f(x):\n", "class A:\n    def __init__(self")
    ]
    together = greedy_continuations(pair, prompts, 12, batch=3)
    alone = [greedy_continuations(pair, [p], 12)[0] for p in prompts]
    assert together == alone


def _model_dir(root: Path, name: str, config: dict[str, Any]) -> Path:
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return d


def test_a_non_gemma4_target_is_refused_naming_its_architecture(tmp_path: Path) -> None:
    target = _model_dir(tmp_path, "t", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    with pytest.raises(UserError, match="this target is LlamaForCausalLM") as err:
        check_pair(target, TINY_GEMMA4_ASSISTANT_DIR)
    assert "\n" not in str(err.value)


def test_a_drafter_other_than_gemma4_assistant_is_refused(tmp_path: Path) -> None:
    drafter = _model_dir(tmp_path, "d", {"architectures": ["Eagle3LlamaForCausalLM"], "model_type": "llama"})
    with pytest.raises(UserError, match="this drafter is Eagle3LlamaForCausalLM"):
        check_pair(TINY_GEMMA4_TARGET_DIR, drafter)
    unified = _model_dir(tmp_path, "u", {"architectures": ["X"], "model_type": "gemma4_unified_assistant"})
    with pytest.raises(UserError, match="model_type gemma4_unified_assistant"):
        check_pair(TINY_GEMMA4_TARGET_DIR, unified)


def test_a_pair_without_weights_on_this_host_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"no config\.json here"):
        check_pair(tmp_path / "google/gemma-4-E4B-it", TINY_GEMMA4_ASSISTANT_DIR)
    with pytest.raises(UserError, match="here or in the Hugging Face cache"):
        check_pair("mtpbench-test/no-such-model", TINY_GEMMA4_ASSISTANT_DIR)  # a hub id never downloaded
    with pytest.raises(UserError, match="needs a draft model"):
        check_pair(TINY_GEMMA4_TARGET_DIR, None)
