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

from mtpbench.patches.faults.lookup_drafts import LookupFault, perturb

FAULT = LookupFault(
    "vllm.v1.spec_decode.ngram_proposer",
    "NgramProposer",
    "__mtpbench_perturb_ngram_drafts__",
    "n-gram draft tokens from position 1 on perturbed in every step (NgramProposer.propose)",
)
apply = FAULT.apply
observations = FAULT.observations
corrupting = FAULT.corrupting

__all__ = ["FAULT", "apply", "corrupting", "observations", "perturb"]
