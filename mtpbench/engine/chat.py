"""Prompts as the engine receives them: raw text (a completion prompt), or a conversation rendered by the
target tokenizer's chat template; and conversations of several user turns (MT-Bench's two turns).

Runs inside the build's interpreter like the worker: the standard library at module level, and of mtpbench
the engine's records module (whose prompt loop runs the conversations) and schema.py. A prompt set says
`chat_template: raw | chat` (a config may override it); the choice is part of the set's sha256, so a raw run
is never compared with a chat baseline.

Chat prompts are rendered the way vLLM's acceptance-length test does (tests/v1/spec_decode/
test_acceptance_length.py @029ba375, get_mt_bench_prompts): one user message, `add_generation_prompt=True`,
and the rendered text encoded with `add_special_tokens=False` (the template already holds the BOS; a second
one would change what the target sees), sent as token ids.

A conversation runs one turn after another, each turn's answer appended before the next user turn (chat:
as an assistant message; raw: the answer, a blank line, then the next turn). Its counts are the engine's
counters around the whole conversation, with the per-request counts of its turns summed beside them, so one
prompt record still stands for one prompt: the unit of evidence stays the prompt.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mtpbench.engine.records import Answer, PromptLoop, add_counts, output_counts
from mtpbench.schema import SpecCounts


def has_conversations(job: dict[str, Any]) -> bool:
    return any(p.get("followups") for p in job["prompts"])


def engine_prompt(tokenizer: Any, messages: list[dict[str, str]], mode: str) -> Any:
    """What the engine is given for a conversation so far (ending with a user turn)."""
    if mode == "raw":
        return "".join(m["content"] + ("\n\n" if m["role"] == "assistant" else "") for m in messages)
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # a tokenizer without a template raises ValueError; others their own
        raise RuntimeError(
            f"chat_template: chat, but the target's tokenizer cannot render a chat ({exc}); "
            "set chat_template: raw for a model without a chat template"
        ) from exc
    return {"prompt_token_ids": list(tokenizer.encode(text, add_special_tokens=False))}


def render_single_turn(llm: Any, prompts: list[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """Single-turn prompts with their engine input under `input` (the worker sends that when present)."""
    if mode == "raw":
        return prompts
    tok = llm.get_tokenizer()
    return [{**p, "input": engine_prompt(tok, [{"role": "user", "content": p["text"]}], mode)} for p in prompts]


def _add(a: SpecCounts | None, b: SpecCounts | None) -> SpecCounts | None:
    if a is None or b is None:
        return b if a is None else a
    return add_counts(a, b)


def run_conversations(loop: PromptLoop, prompts: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """Each prompt as a conversation (its text, then its followups), one prompt at a time through the
    sequential prompt loop, whose counts are the cumulative counters' difference around the whole
    conversation; returns what the cell_end record adds."""
    tok = loop.llm.get_tokenizer()

    def converse(loop: PromptLoop, prompt: dict[str, Any]) -> Answer:
        messages: list[dict[str, str]] = []
        outputs: list[Any] = []
        per_request: SpecCounts | None = None
        for turn in [prompt["text"], *prompt.get("followups", [])]:
            messages.append({"role": "user", "content": turn})
            out = loop.llm.generate([engine_prompt(tok, messages, mode)], loop.sp, use_tqdm=False)[0]
            messages.append({"role": "assistant", "content": out.outputs[0].text})
            outputs.append(out)
            per_request = _add(per_request, output_counts(out, loop.k))
        token_ids = [list(o.outputs[0].token_ids) for o in outputs]
        # the whole conversation's generated tokens and text identity (a changed first answer changes it)
        fields = {
            "num_generated_tokens": sum(len(t) for t in token_ids),
            "output_sha256": hashlib.sha256(json.dumps(token_ids).encode()).hexdigest(),
            "turns": len(outputs),
        }
        return Answer(outputs[-1], per_request, fields)

    loop.sequential(prompts, answer=converse)
    return {"prompt_mode": "sequential", "conversations": True}
