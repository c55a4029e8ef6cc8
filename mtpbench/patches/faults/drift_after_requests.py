"""Fault `drift-after-requests`: the drafter's tokens go wrong once the engine has served N requests.

A fault that only a long-lived engine shows, to prove that the soak workload's `drift` finding sees what
fresh-process repeats cannot (vllm-ascend#10495: MTP acceptance decays over rounds within one server). The
patch counts the requests the engine core admits (`vllm.v1.engine.core.EngineCore.add_request`, v0.32.0
core.py:508) and, once more than N were admitted, perturbs every draft the proposer returns from position 1
on (`SpecDecodeBaseProposer.propose`, vllm/v1/spec_decode/llm_base_proposer.py:512 at v0.32.0, which the
Gemma4 MTP, EAGLE and draft-model proposers share; it returns the [batch, k] draft token ids): token t
becomes t-1 (t+1 for token 0), always another valid id. Position 0 is left alone, so acceptance falls (the
target rejects the perturbed tokens) without reaching zero, and the text stays the target's.

N is `MTPBENCH_DRIFT_AFTER` (default 40, the embedded prompt set's size: a fresh process of the embedded
default never reaches it). The switch is per engine step, not per request: a soak round sends all its
prompts at once, so the round holding request N+1 is the first one corrupted. Standard library only until
`apply()` imports vLLM; idempotent (the worker and vLLM's plugin hook may both apply it).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from mtpbench.patches.contract import PatchNotApplicable
from mtpbench.patches.faults.draft_perturbation import perturbing, wrap_propose

AFTER_ENV = "MTPBENCH_DRIFT_AFTER"
DEFAULT_AFTER = 40
_MARKER = "__mtpbench_drift_after_requests__"

_seen: dict[str, int] = {"requests": 0, "corrupted_steps": 0}


def after() -> int:
    raw = os.environ.get(AFTER_ENV, "")
    try:
        n = int(raw) if raw.strip() else DEFAULT_AFTER
    except ValueError:
        raise PatchNotApplicable(f"{AFTER_ENV}={raw!r} is not a whole number of requests") from None
    if n < 0:
        raise PatchNotApplicable(f"{AFTER_ENV}={n}: a count of requests cannot be negative")
    return n


def _counting(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def add_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        _seen["requests"] += 1
        return original(self, *args, **kwargs)

    setattr(add_request, _MARKER, True)
    return add_request


def _corrupting(original: Callable[..., Any], n: int) -> Callable[..., Any]:
    """The proposer's `propose`, perturbing its drafts once more than n requests were admitted."""
    return perturbing(original, _MARKER, _seen, lambda _proposer: _seen["requests"] > n)


def apply() -> str:
    """Patch vLLM in this process; return one line saying what changed (see the module docstring)."""
    import importlib

    n = after()
    try:
        core = importlib.import_module("vllm.v1.engine.core")
    except ImportError as exc:
        raise PatchNotApplicable(f"this vLLM has no v1 engine core ({exc})") from exc
    engine_cls = getattr(core, "EngineCore", None)
    if not isinstance(engine_cls, type):
        raise PatchNotApplicable("no EngineCore.add_request to wrap")
    wrap_propose(_MARKER, lambda propose: _corrupting(propose, n))
    if not getattr(engine_cls.add_request, _MARKER, False):
        engine_cls.add_request = _counting(engine_cls.add_request)
    return f"draft tokens from position 1 on perturbed once more than {n} requests were admitted ({AFTER_ENV})"


def observations() -> dict[str, object]:
    """Recorded in cell_end: how many requests the engine admitted and in how many steps drafts were perturbed."""
    return {"after": after(), **_seen}
