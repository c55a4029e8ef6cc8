"""Faults, probes and CPU kernels a worker applies to vLLM before its engine starts (a variant's patches).

A patch module has `apply()` (and may have `check()` and `observations()`); the contract it keeps, and
the `MTPBENCH_PATCHES` variable that asks for patches, are in `contract.py`, the leaf every patch and fix
imports. The table naming every patch (`REGISTRY`, with `apply_all` and `observations`) is
mtpbench/fixes/registry.py: it names fixes too, so it lives one stage up and this package never imports it.

- flatten: fault `flatten-draft-metadata` (the vllm-ascend graph-mode flattening bug, on any build)
- drift: fault `drift-after-requests` (drafts perturbed after N requests: the soak's long-lived fault)
- cached: fault `prefix-caching-fault` (drafts perturbed only with prefix caching on: a feature fault)
- synthetic: `cpu-synthetic-rejection` (the CPU engine accepts drafts at configured rates)
- expand: `cpu-expand-kernel` (sampled spec decode on the CPU engine uses the request's temperature)
- binding, task_binding: probe `metadata-binding` (which KV-cache group each draft layer read)
- replay: probe `graph-replay` (the drafter's graph captures and replays)

Imported inside the *build's* interpreter: standard library only at module level; vLLM is imported when a
patch is applied.
"""

from __future__ import annotations

from mtpbench.patches.contract import PATCHES_ENV, PatchNotApplicable, requested_from_env

__all__ = ["PATCHES_ENV", "PatchNotApplicable", "requested_from_env"]
