"""Faults planted on purpose: each reproduces a known bug's shape on any build, so the gate can be shown to catch it.
One module per fault a variant asks for, named after its patch name (mtpbench/fixes/registry.py); source_edits.py
holds the faults a build's `post_install` step edits into vLLM's source (`mtpbench selftest --class`), and
lookup_drafts.py what the two lookup methods' faults share. Standard library only at module level.

- drift_after_requests.py: Fault `drift-after-requests`: the drafter's tokens go wrong once the engine has served N
  requests
- lookup_drafts.py: What the lookup methods' planted faults share: vLLM's n-gram and suffix proposers are not built
  on `SpecDecodeBaseProposer`
- flatten_draft_metadata.py: Fault `flatten-draft-metadata`: bind every Gemma4 MTP draft layer to one KV-cache
  group's metadata
- perturb_ngram_drafts.py: Fault `perturb-ngram-drafts`: the n-gram lookup's drafts go wrong from position 1 on, in
  every step
- perturb_suffix_drafts.py: Fault `perturb-suffix-drafts`: suffix decoding's drafts go wrong from position 1 on, in
  every step
- prefix_caching_fault.py: Fault `prefix-caching-fault`: the drafter's tokens go wrong only in an engine with prefix
  caching on
- source_edits.py: Source-level faults of the Gemma4 MTP draft's attention inputs, each one edit of vLLM 0.32's real
  proposer (vllm/v1/spec_decode/gemma4.py) made by a build's `post_install` step
"""
