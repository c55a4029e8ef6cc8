"""The one proposer wrapper the draft-token faults share: wrap vLLM's `SpecDecodeBaseProposer.propose`
(vllm/v1/spec_decode/llm_base_proposer.py at v0.32.0, which the Gemma4 MTP, EAGLE and draft-model proposers
share; it returns the [batch, k] draft token ids, or a tuple whose first item they are) and perturb every
draft from position 1 on in the steps a fault's condition selects. Position 0 is left alone, so acceptance
falls (the target rejects the perturbed tokens) without reaching zero, and the text stays the target's.
Standard library only until a perturbation runs (torch is imported then, inside the engine's process).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from mtpbench.patches.contract import PatchNotApplicable


def perturb(drafts: Any) -> Any:
    """Draft ids with every position from 1 on moved to a neighbouring id (a torch tensor [batch, k]): token t
    becomes t-1 (t+1 for token 0), always another valid id."""
    import torch

    if drafts.dim() != 2 or drafts.shape[1] < 2:
        return drafts
    out = drafts.clone()
    tail = out[:, 1:]
    out[:, 1:] = torch.where(tail > 0, tail - 1, tail + 1)
    return out


def perturbing(
    original: Callable[..., Any], marker: str, seen: dict[str, int], corrupt: Callable[[Any], bool]
) -> Callable[..., Any]:
    """`original` (a proposer's `propose`) wrapped so that a step for which `corrupt(proposer)` holds returns
    perturbed drafts; `seen["corrupted_steps"]` counts those steps. The wrapper carries `marker`, so a second
    apply (the worker and vLLM's plugin hook may both apply a patch) does not wrap twice."""

    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        if not corrupt(self):
            return out
        seen["corrupted_steps"] += 1
        if isinstance(out, tuple):  # proposers that also return how many drafts are valid
            return (perturb(out[0]), *out[1:])
        return perturb(out)

    setattr(propose, marker, True)
    return propose


def proposer_base() -> type:
    """vLLM's draft proposer base class, or PatchNotApplicable where this vLLM has none to wrap."""
    try:
        base = importlib.import_module("vllm.v1.spec_decode.llm_base_proposer")
    except ImportError as exc:
        raise PatchNotApplicable(f"this vLLM has no v1 draft proposer base ({exc})") from exc
    proposer_cls = getattr(base, "SpecDecodeBaseProposer", None)
    if not isinstance(proposer_cls, type) or not callable(getattr(proposer_cls, "propose", None)):
        raise PatchNotApplicable("no SpecDecodeBaseProposer.propose to wrap")
    return proposer_cls


def wrap_propose(marker: str, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace the proposer base's `propose` by `wrapper(propose)` once (idempotent by `marker`)."""
    proposer_cls = proposer_base()
    if not getattr(proposer_cls.propose, marker, False):
        proposer_cls.propose = wrapper(proposer_cls.propose)
