"""Shipped fixes for known speculative-decoding bugs, the registry of every named patch, and their status.

- registry: `REGISTRY` (patch name -> "module:function", faults and probes of mtpbench/patches/ and the
  fixes here), `apply_one` / `apply_all` / `observations` (the worker and the vLLM plugin hook apply
  through it), `is_fix`. It names patches/ and fixes/ modules, so it lives here, one stage above patches/;
  the modules it names import the leaf mtpbench/patches/contract.py, never the registry.
- ascend_gemma4: the `ascend-gemma4-layer-params` fix; `layer_source` holds its logic, `ascend_api`
  recognises the vllm-ascend API shapes it targets.
- status: what became of a run's requested patches (`unapplied`, `headline`) and the dry run's
  `preflight`, which runs probe.py (`python -m mtpbench.fixes.probe NAME`) in each build's interpreter.

A fix is never imported for its side effects: importing a module of this package changes nothing until
its `apply()` runs. Modules here are imported inside the *build's* interpreter, so they use only the
standard library at module level and import vllm / vllm_ascend lazily.
"""

from __future__ import annotations

from mtpbench.fixes.registry import REGISTRY, PatchOutcome, apply_all, apply_one, is_fix, observations
from mtpbench.fixes.status import (
    FIX_NOT_APPLIED,
    PATCH_NOT_APPLIED,
    Preflight,
    Unapplied,
    headline,
    preflight,
    unapplied,
)

__all__ = [
    "FIX_NOT_APPLIED",
    "PATCH_NOT_APPLIED",
    "REGISTRY",
    "PatchOutcome",
    "Preflight",
    "Unapplied",
    "apply_all",
    "apply_one",
    "headline",
    "is_fix",
    "observations",
    "preflight",
    "unapplied",
]
