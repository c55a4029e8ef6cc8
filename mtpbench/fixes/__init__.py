"""Shipped fixes for known speculative-decoding bugs, installed into a running vLLM / vllm-ascend by name.

Each fix is reachable through `mtpbench.patches.REGISTRY` (the config's `variants` axis, the worker and the
`vllm.general_plugins` entry point all go through it), never imported for its side effects: importing
a module of this package changes nothing until its `apply()` runs. Modules here are imported inside the
*build's* interpreter, so they use only the standard library at module level and import vllm /
vllm_ascend lazily. `layer_source` holds the fix's logic, `ascend_api` recognises the vllm-ascend API
shapes it targets, and `ascend_gemma4` installs it.
"""
