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

from mtpbench.patches.faults.lookup_drafts import LookupFault

FAULT = LookupFault(
    "vllm.v1.spec_decode.suffix_decoding",
    "SuffixDecodingProposer",
    "__mtpbench_perturb_suffix_drafts__",
    "suffix decoding draft tokens from position 1 on perturbed in every step (SuffixDecodingProposer.propose)",
)
apply = FAULT.apply
observations = FAULT.observations
corrupting = FAULT.corrupting

__all__ = ["FAULT", "apply", "corrupting", "observations"]
