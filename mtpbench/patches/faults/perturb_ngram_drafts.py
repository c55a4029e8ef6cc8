"""Fault `perturb-ngram-drafts`: the n-gram lookup's drafts go wrong from position 1 on, in every step.

The n-gram method's planted fault, for the selftest's per-method proof (cli/selftest_methods.py). vLLM's
`NgramProposer` (vllm/v1/spec_decode/ngram_proposer.py at v0.32.0, `propose` at lines 138-173; the same file
from 0.27.1 on) is not built on `SpecDecodeBaseProposer`, so the draft faults that wrap that base
(patches/faults/draft_perturbation.py) never reach it. This patch wraps `NgramProposer.propose`, which returns
one list of draft token ids per request (the model runner, gpu_model_runner.py:4770-4777 at v0.32.0, hands
them to the scheduler as they are), and moves every draft from position 1 on to a neighbouring id
(lookup_drafts.py, shared with the suffix method's fault). The module is patched as vLLM imports it, never
imported here. Standard library only (the drafts are Python lists); idempotent.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

from mtpbench.patches.contract import PatchNotApplicable
from mtpbench.patches.faults import lookup_drafts

MODULE = "vllm.v1.spec_decode.ngram_proposer"
_MARKER = "__mtpbench_perturb_ngram_drafts__"

_seen: dict[str, int] = {"steps": 0, "corrupted_steps": 0}

perturb = lookup_drafts.perturb


def corrupting(original: Callable[..., Any]) -> Callable[..., Any]:
    """`NgramProposer.propose` perturbing its drafts in every step that proposes a draft of 2 tokens or more."""
    return lookup_drafts.corrupting(original, _MARKER, _seen)


def _patch(module: ModuleType) -> None:
    lookup_drafts.wrap_propose(module, "NgramProposer", _MARKER, _seen)


def apply() -> str:
    """Patch vLLM in this process, now if vLLM imported the n-gram proposer already, else as it imports it;
    return one line saying what changed (see the module docstring)."""
    if importlib.util.find_spec("vllm") is None:
        raise PatchNotApplicable("vllm is not installed in this interpreter")
    lookup_drafts.patch_now_or_on_import(MODULE, _patch)
    return "n-gram draft tokens from position 1 on perturbed in every step (NgramProposer.propose)"


def observations() -> dict[str, object]:
    """Recorded in cell_end: proposer steps seen, and how many had a draft to perturb."""
    return {**_seen}
