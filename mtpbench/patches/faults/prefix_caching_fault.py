"""Fault `prefix-caching-fault`: the drafter's tokens go wrong only in an engine with prefix caching on.

A planted feature-dependent fault (the shape of vllm#51771, acceptance lower with prefix caching on), to prove
that a feature mode held against the reference mode is flagged as `mode-divergence` naming the feature
(judge/signals/features.py, docs/features.md). The patch wraps the draft proposer's `propose`
(`SpecDecodeBaseProposer.propose`, vllm/v1/spec_decode/llm_base_proposer.py at v0.32.0, shared by the Gemma4
MTP, EAGLE and draft-model proposers) and, when the proposer's engine config has
`cache_config.enable_prefix_caching` on, perturbs every draft from position 1 on as `drift-after-requests`
does (patches/faults/draft_perturbation.py, the wrapper both faults share): acceptance falls, position 0
and the text stay the target's.
With prefix caching off it changes nothing. Standard library only until `apply()` imports vLLM; idempotent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mtpbench.patches.faults.draft_perturbation import perturbing, wrap_propose

_MARKER = "__mtpbench_prefix_caching_fault__"

_seen: dict[str, int] = {"steps": 0, "corrupted_steps": 0}


def prefix_caching_on(proposer: Any) -> bool:
    """Whether the proposer's engine runs with prefix caching (its vllm_config's cache_config)."""
    cache = getattr(getattr(proposer, "vllm_config", None), "cache_config", None)
    return bool(getattr(cache, "enable_prefix_caching", False))


def _corrupt(proposer: Any) -> bool:
    _seen["steps"] += 1
    return prefix_caching_on(proposer)


def corrupting(original: Callable[..., Any]) -> Callable[..., Any]:
    """The proposer's `propose`, perturbing its drafts in every step of an engine with prefix caching on."""
    return perturbing(original, _MARKER, _seen, _corrupt)


def apply() -> str:
    """Patch vLLM in this process; return one line saying what changed (see the module docstring)."""
    wrap_propose(_MARKER, corrupting)
    return "draft tokens from position 1 on perturbed in engines with prefix caching on"


def observations() -> dict[str, object]:
    """Recorded in cell_end: draft steps seen, and how many were perturbed (prefix caching on)."""
    return {**_seen}
