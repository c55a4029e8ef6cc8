"""Fault `prefix-caching-fault`: the drafter's tokens go wrong only in an engine with prefix caching on.

A planted feature-dependent fault (the shape of vllm#51771, acceptance lower with prefix caching on), to prove
that a feature mode held against the reference mode is flagged as `mode-divergence` naming the feature
(judge/features.py, docs/features.md). The patch wraps the draft proposer's `propose`
(`SpecDecodeBaseProposer.propose`, vllm/v1/spec_decode/llm_base_proposer.py at v0.32.0, shared by the Gemma4
MTP, EAGLE and draft-model proposers) and, when the proposer's engine config has
`cache_config.enable_prefix_caching` on, perturbs every draft from position 1 on as `drift-after-requests`
does (patches/drift.py `perturb`): acceptance falls, position 0 and the text stay the target's. With prefix
caching off it changes nothing. Standard library only until `apply()` imports vLLM; idempotent.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mtpbench.patches.contract import PatchNotApplicable
from mtpbench.patches.drift import perturb

_MARKER = "__mtpbench_prefix_caching_fault__"

_seen: dict[str, int] = {"steps": 0, "corrupted_steps": 0}


def prefix_caching_on(proposer: Any) -> bool:
    """Whether the proposer's engine runs with prefix caching (its vllm_config's cache_config)."""
    cache = getattr(getattr(proposer, "vllm_config", None), "cache_config", None)
    return bool(getattr(cache, "enable_prefix_caching", False))


def corrupting(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        _seen["steps"] += 1
        if not prefix_caching_on(self):
            return out
        _seen["corrupted_steps"] += 1
        if isinstance(out, tuple):  # proposers that also return how many drafts are valid
            return (perturb(out[0]), *out[1:])
        return perturb(out)

    setattr(propose, _MARKER, True)
    return propose


def apply() -> str:
    """Patch vLLM in this process; return one line saying what changed (see the module docstring)."""
    import importlib

    try:
        base = importlib.import_module("vllm.v1.spec_decode.llm_base_proposer")
    except ImportError as exc:
        raise PatchNotApplicable(f"this vLLM has no v1 draft proposer base ({exc})") from exc
    proposer_cls = getattr(base, "SpecDecodeBaseProposer", None)
    if not isinstance(proposer_cls, type) or not callable(getattr(proposer_cls, "propose", None)):
        raise PatchNotApplicable("no SpecDecodeBaseProposer.propose to wrap")
    if not getattr(proposer_cls.propose, _MARKER, False):
        proposer_cls.propose = corrupting(proposer_cls.propose)
    return "draft tokens from position 1 on perturbed in engines with prefix caching on"


def observations() -> dict[str, object]:
    """Recorded in cell_end: draft steps seen, and how many were perturbed (prefix caching on)."""
    return {**_seen}
