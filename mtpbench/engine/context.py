"""A context sweep's engine inputs (issue 31, workload.context): each prompt behind the first
`context_tokens` tokens of one shared text, sent as token ids so that the bucket's length is exact in the
target's own tokenizer (text cut at a byte count would re-tokenize to another length). Runs in the build's
interpreter: standard library only, the tokenizer comes in as an argument.
"""

from __future__ import annotations

from typing import Any


def context_ids(tokenizer: Any, text: str, n: int) -> list[int]:
    """The first n token ids of the text, repeated end to end until there are n (a short source still fills
    a long bucket)."""
    if n <= 0:
        return []
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if not ids:
        raise ValueError("the shared context tokenizes to nothing")
    repeats = -(-n // len(ids))
    return (ids * repeats)[:n]


def with_context(tokenizer: Any, prompts: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The prompts with their engine input under `input`: the start token(s) the tokenizer adds, the
    bucket's context ids, then the prompt's own ids; a prompt without context_tokens is left as it is."""
    longest = max((int(p.get("context_tokens") or 0) for p in prompts), default=0)
    shared = context_ids(tokenizer, text, longest)
    out: list[dict[str, Any]] = []
    for p in prompts:
        n = p.get("context_tokens")
        if n is None:
            out.append(p)
            continue
        own = list(tokenizer.encode(p["text"], add_special_tokens=True))
        special = len(tokenizer.encode("", add_special_tokens=True))
        # The start token first, as in a prompt without context; then the context, then the prompt's text.
        ids = own[:special] + shared[: int(n)] + own[special:]
        out.append({**p, "input": {"prompt_token_ids": ids}})
    return out
