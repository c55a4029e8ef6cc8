"""Patch `cpu-synthetic-rejection`: vLLM's synthetic rejection sampling on the CPU sampler.

vLLM 0.32 can accept drafts at a configured, known rate instead of comparing them with the target
(`speculative_config`: `rejection_sample_method: synthetic`, `synthetic_acceptance_rates: [p0, p1, …]`,
per-position *unconditional* rates, non-increasing). `RejectionSampler.__init__`
(vllm/v1/sample/rejection_sampler.py, lines 83-96 at v0.32.0) turns them into conditional rates with
`unconditional_to_conditional_rates` (vllm/v1/spec_decode/utils.py:848, c_i = p_i / p_{i-1}) and the
Triton kernels accept draft i of a request when `uniform[i] < c_i` and draft i >= 0, stopping at the
first rejection (`rejection_greedy_sample_kernel`, rejection_sampler.py:726-780: a rejected position
takes the target's argmax; `rejection_random_sample_kernel`, lines 829-900: it takes the recovered
token; both append the bonus token when nothing was rejected). So position i is accepted with
probability c_0·…·c_i = p_i: the measured unconditional rate is the configured one.

The CPU platform replaces those kernels with C++ ones (`vllm/utils/cpu_triton_utils.py`,
`_rejection_greedy_sample_kernel_impl` line 313 and `_rejection_random_sample_kernel_impl` line 346),
which assert "Synthetic acceptance not supported with CPU sampling". This patch swaps both module
functions for wrappers that run the same acceptance rule in torch when SYNTHETIC_MODE is set and call the
original C++ kernel otherwise; `CpuPlatform.register_triton_kernel_overrides` (vllm/platforms/cpu.py:670)
reads them from the module when the engine's worker starts, after the worker applied this patch. Where
real Triton runs (GPUs), the overrides are not used and the stock option needs no patch: the patch is then
"not applicable" and the engine uses vLLM's own kernel. Standard library only until `apply()`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from mtpbench.patches.contract import PatchNotApplicable

_MODULE = "vllm.utils.cpu_triton_utils"
_GREEDY = "_rejection_greedy_sample_kernel_impl"
_RANDOM = "_rejection_random_sample_kernel_impl"
_MARKER = "__mtpbench_cpu_synthetic_rejection__"


def accepted_prefix(draft_ids: Sequence[int], uniforms: Sequence[float], conditional: Sequence[float]) -> int:
    """How many leading drafts of one request the synthetic rule accepts (see the module docstring).

    Draft i is accepted when it is a real token (>= 0, vLLM pads with -1) and `uniforms[i] <
    conditional[i]`; the first rejection ends the request's drafts.
    """
    for i, (tok, u) in enumerate(zip(draft_ids, uniforms, strict=True)):
        if tok < 0 or not u < conditional[i]:
            return i
    return len(draft_ids)


def _synthetic_fill(
    output_token_ids: Any,
    cu_num_draft_tokens: Any,
    draft_token_ids: Any,
    rejected_token_ids: Any,
    bonus_token_ids: Any,
    uniform_probs: Any,
    conditional: Any,
    skip: Callable[[int], bool],
) -> None:
    """Write accepted drafts, the replacement token at the first rejection, or the bonus token."""
    ends = [int(x) for x in cu_num_draft_tokens.tolist()]
    drafts = [int(x) for x in draft_token_ids.tolist()]
    rejected = [int(x) for x in rejected_token_ids.tolist()]
    bonus = [int(x) for x in bonus_token_ids.reshape(-1).tolist()]
    uniforms = [float(x) for x in uniform_probs.tolist()]
    rates = [float(x) for x in conditional.tolist()]
    start = 0
    for req, end in enumerate(ends):
        if not skip(req):
            n = end - start
            accepted = accepted_prefix(drafts[start:end], uniforms[start:end], rates[:n])
            row = drafts[start : start + accepted]
            row.append(rejected[start + accepted] if accepted < n else bonus[req])
            output_token_ids[req, : len(row)] = output_token_ids.new_tensor(row)
        start = end


def _greedy_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def greedy(
        output_token_ids: Any,
        cu_num_draft_tokens: Any,
        draft_token_ids: Any,
        target_argmax: Any,
        bonus_token_ids: Any,
        is_greedy: Any,
        max_spec_len: int,
        uniform_probs: Any = None,
        synthetic_conditional_rates: Any = None,
        SYNTHETIC_MODE: bool = False,
    ) -> None:
        if not SYNTHETIC_MODE:
            return original(
                output_token_ids,
                cu_num_draft_tokens,
                draft_token_ids,
                target_argmax,
                bonus_token_ids,
                is_greedy,
                max_spec_len,
                uniform_probs,
                synthetic_conditional_rates,
                SYNTHETIC_MODE,
            )
        # The greedy kernel skips requests that are not greedy (rejection_sampler.py:740-743).
        flags = None if is_greedy is None else [bool(x) for x in is_greedy.tolist()]
        _synthetic_fill(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            target_argmax,
            bonus_token_ids,
            uniform_probs,
            synthetic_conditional_rates,
            lambda req: flags is not None and not flags[req],
        )
        return None

    setattr(greedy, _MARKER, True)
    return greedy


def _random_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def random(
        output_token_ids: Any,
        cu_num_draft_tokens: Any,
        draft_token_ids: Any,
        draft_probs: Any,
        target_probs: Any,
        bonus_token_ids: Any,
        recovered_token_ids: Any,
        uniform_probs: Any,
        is_greedy: Any,
        max_spec_len: int,
        vocab_size: int,
        synthetic_conditional_rates: Any = None,
        NO_DRAFT_PROBS: bool = False,
        SYNTHETIC_MODE: bool = False,
    ) -> None:
        if not SYNTHETIC_MODE:
            return original(
                output_token_ids,
                cu_num_draft_tokens,
                draft_token_ids,
                draft_probs,
                target_probs,
                bonus_token_ids,
                recovered_token_ids,
                uniform_probs,
                is_greedy,
                max_spec_len,
                vocab_size,
                synthetic_conditional_rates,
                NO_DRAFT_PROBS,
                SYNTHETIC_MODE,
            )
        # The random kernel skips greedy requests (rejection_sampler.py:846-849).
        flags = [bool(x) for x in is_greedy.tolist()]
        _synthetic_fill(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            recovered_token_ids,
            bonus_token_ids,
            uniform_probs,
            synthetic_conditional_rates,
            lambda req: flags[req],
        )
        return None

    setattr(random, _MARKER, True)
    return random


def _description() -> str:
    return (
        f"{_MODULE}.{_GREEDY} and .{_RANDOM} wrapped: rejection_sample_method=synthetic accepts draft i "
        "when uniform < conditional rate i (vLLM's Triton rule) instead of asserting"
    )


def apply() -> str:
    """Patch vLLM's CPU sampler kernels in this process; return one line saying what changed."""
    import importlib

    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON:
        raise PatchNotApplicable("real Triton kernels run here: vLLM's own synthetic rejection sampling is used")
    try:
        module = importlib.import_module(_MODULE)
    except ImportError as exc:
        raise PatchNotApplicable(f"no CPU kernel overrides in this vLLM ({_MODULE}: {exc})") from exc
    for attr, wrap in ((_GREEDY, _greedy_wrapper), (_RANDOM, _random_wrapper)):
        current = getattr(module, attr, None)
        if not callable(current):
            raise PatchNotApplicable(f"{_MODULE} has no {attr}")
        if not getattr(current, _MARKER, False):
            setattr(module, attr, wrap(current))
    return _description()
