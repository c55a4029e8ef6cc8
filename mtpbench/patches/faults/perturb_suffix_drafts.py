"""Fault `perturb-suffix-drafts`: suffix decoding's drafts go wrong from position 1 on, in every step.

The suffix method's planted fault, for the selftest's per-method proof (cli/selftest_methods.py). vLLM's
`SuffixDecodingProposer` (vllm/v1/spec_decode/suffix_decoding.py at v0.32.0, `propose` at lines 34-98) asks
arctic-inference's suffix tree for each request's draft and returns one list of draft token ids per request,
of any length up to k (empty where no suffix of the text recurs). Like the n-gram proposer it is not built on
`SpecDecodeBaseProposer`; this patch wraps its `propose` and moves every draft from position 1 on to a
neighbouring id (lookup_drafts.py). The tree itself is left alone: it holds the sampled tokens, which the
target verified, so the fault is in the drafts only. The module is patched as vLLM imports it, never imported
here. Standard library only; idempotent.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

from mtpbench.patches.contract import PatchNotApplicable
from mtpbench.patches.faults import lookup_drafts

MODULE = "vllm.v1.spec_decode.suffix_decoding"
_MARKER = "__mtpbench_perturb_suffix_drafts__"

_seen: dict[str, int] = {"steps": 0, "corrupted_steps": 0}


def corrupting(original: Callable[..., Any]) -> Callable[..., Any]:
    """`SuffixDecodingProposer.propose` perturbing its drafts in every step with a draft of 2 tokens or more."""
    return lookup_drafts.corrupting(original, _MARKER, _seen)


def _patch(module: ModuleType) -> None:
    lookup_drafts.wrap_propose(module, "SuffixDecodingProposer", _MARKER, _seen)


def apply() -> str:
    """Patch vLLM in this process, now if vLLM imported the suffix proposer already, else as it imports it;
    return one line saying what changed (see the module docstring)."""
    if importlib.util.find_spec("vllm") is None:
        raise PatchNotApplicable("vllm is not installed in this interpreter")
    lookup_drafts.patch_now_or_on_import(MODULE, _patch)
    return "suffix decoding draft tokens from position 1 on perturbed in every step (SuffixDecodingProposer.propose)"


def observations() -> dict[str, object]:
    """Recorded in cell_end: proposer steps seen, and how many had a draft to perturb."""
    return {**_seen}
