"""The named patches a variant may ask for (the config's `variants` axis), and how they are applied.

A variant is a list of patch names. Each name maps to `module:function` below: faults, probes and CPU
kernels from mtpbench/patches/, shipped fixes from mtpbench/fixes/. The function takes no arguments and
keeps the contract of mtpbench/patches/contract.py (returns one line, or raises `PatchNotApplicable`).
The worker, the vLLM plugin hook (mtpbench/plugin.py), the config's validation and the fix preflight all go
through this one table.

Why here: the registry names modules of both patches/ and fixes/, so it lives in the higher of the two
stages, and nothing it names imports it back (they import the leaf contract.py only): the strings below
are imports too, and the layering test reads them as such. Standard library only at module level: it is
imported inside the *build's* interpreter; a patch module is imported when its patch is applied.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass

from mtpbench.patches.contract import PatchNotApplicable

# name -> "module:function". The fault reproduces the vllm-ascend flattening bug on any build with the
# Gemma4 MTP proposer; the fix is the per-layer parameter resolution for vllm-ascend graph mode; the
# synthetic sampler lets the CPU engine accept drafts at configured rates (the gate's calibration); the
# expand kernel makes sampled (temperature > 0) spec decode on the CPU engine use the request's temperature.
REGISTRY: dict[str, str] = {
    "flatten-draft-metadata": "mtpbench.patches.faults.flatten_draft_metadata:apply",
    "cpu-synthetic-rejection": "mtpbench.patches.cpu.synthetic_rejection:apply",
    "cpu-expand-kernel": "mtpbench.patches.cpu.expand_kernel:apply",
    # MLA's rotary embedding on the CPU engine: the stock op rotates a [tokens, heads, rope] view's heads at
    # other tokens' positions (the tiny DeepSeek-V3 target's text then moves with its drafts).
    "cpu-rotary-embedding": "mtpbench.patches.cpu.rotary_embedding:apply",
    "ascend-gemma4-layer-params": "mtpbench.fixes.ascend_gemma4:apply",
    # A fault that only a long-lived engine shows (drafts perturbed after N requests): the soak's `drift`.
    "drift-after-requests": "mtpbench.patches.faults.drift_after_requests:apply",
    # A fault active only with prefix caching on (vllm#51771's shape): the feature sweep's `mode-divergence`.
    "prefix-caching-fault": "mtpbench.patches.faults.prefix_caching_fault:apply",
    # The n-gram method's fault (its proposer is not built on SpecDecodeBaseProposer): the selftest's per method.
    "perturb-ngram-drafts": "mtpbench.patches.faults.perturb_ngram_drafts:apply",
    # The suffix method's fault (its proposer is not built on SpecDecodeBaseProposer either).
    "perturb-suffix-drafts": "mtpbench.patches.faults.perturb_suffix_drafts:apply",
    # A probe, not a patch: changes nothing, records which KV-cache group each draft layer read.
    "metadata-binding": "mtpbench.patches.probes.metadata_binding:apply",
    # A probe: counts the drafter's graph captures and replays (the proof that graph mode ran the draft).
    "graph-replay": "mtpbench.patches.probes.graph_replay:apply",
}


@dataclass
class PatchOutcome:
    name: str
    status: str  # "applied" | "not-applicable" | "failed"
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def is_fix(name: str) -> bool:
    """A shipped fix (mtpbench/fixes/), as opposed to a fault or probe injected on purpose."""
    return REGISTRY.get(name, "").startswith("mtpbench.fixes.")


def patch_module(name: str) -> str | None:
    """The module that holds patch `name` (its `apply`, and `check` / `observations` where it has them)."""
    target = REGISTRY.get(name)
    return None if target is None else target.split(":")[0]


def apply_one(name: str) -> PatchOutcome:
    target = REGISTRY.get(name)
    if target is None:
        return PatchOutcome(name, "failed", f"unknown patch {name!r}; known: {', '.join(sorted(REGISTRY))}")
    module_name, func_name = target.split(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        return PatchOutcome(name, "applied", str(func()))
    except PatchNotApplicable as exc:
        return PatchOutcome(name, "not-applicable", str(exc))
    except Exception as exc:
        return PatchOutcome(name, "failed", f"{type(exc).__name__}: {exc}")


def apply_all(names: list[str]) -> list[PatchOutcome]:
    return [apply_one(n) for n in names]


def observations(names: list[str]) -> dict[str, dict[str, object]]:
    """What applied patches saw while the engine ran (a patch module may define `observations()`)."""
    out: dict[str, dict[str, object]] = {}
    for name in names:
        module_name = patch_module(name)
        if module_name is None:
            continue
        func = getattr(importlib.import_module(module_name), "observations", None)
        if callable(func):
            try:
                out[name] = dict(func())
            except Exception as exc:  # an observation must never fail a measured cell
                out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out
