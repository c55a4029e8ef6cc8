"""Faults, probes and CPU kernels a worker applies to vLLM before its engine starts (a variant's patches),
one sub-package per kind (faults/, probes/, cpu/), each module named after its patch (the patch
`flatten-draft-metadata` is faults/flatten_draft_metadata.py; a cpu- patch drops the folder's word).

A patch module has `apply()` (and may have `check()` and `observations()`); the contract it keeps, and
the `MTPBENCH_PATCHES` variable that asks for patches, are in `contract.py`, the leaf every patch and fix
imports. The table naming every patch (`REGISTRY`, with `apply_all` and `observations`) is
mtpbench/fixes/registry.py: it names fixes too, so it lives one stage up and this package never imports it.

- faults/flatten_draft_metadata.py: the vllm-ascend graph-mode flattening bug, on any build
- faults/drift_after_requests.py: drafts perturbed after N requests (the soak's long-lived fault)
- faults/prefix_caching_fault.py: drafts perturbed only with prefix caching on (a feature fault)
- faults/perturb_ngram_drafts.py: n-gram drafts perturbed in every step (the n-gram method's fault)
- faults/perturb_suffix_drafts.py: suffix decoding's drafts perturbed in every step (the suffix method's fault)
- cpu/synthetic_rejection.py: the CPU engine accepts drafts at configured rates
- cpu/expand_kernel.py: sampled spec decode on the CPU engine uses the request's temperature
- probes/metadata_binding.py: which KV-cache group each draft layer read (metadata_binding_tasks.py: the
  same, read from vllm-ascend's draft graph tasks)
- probes/graph_replay.py: the drafter's graph captures and replays

Imported inside the *build's* interpreter: standard library only at module level; vLLM is imported when a
patch is applied.
"""

from __future__ import annotations

from mtpbench.patches.contract import PATCHES_ENV, PatchNotApplicable, requested_from_env

__all__ = ["PATCHES_ENV", "PatchNotApplicable", "requested_from_env"]
