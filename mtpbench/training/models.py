"""Architectures of the tiny Gemma4 target and its gemma4_assistant MTP drafter (configs only, no weights).

The shapes are chosen so vLLM's Gemma4 MTP path is exercised exactly as on the real models: the target has
sliding and full attention layers (two KV-cache groups in vLLM), the drafter has two full-attention layers
(first and last) and two sliding ones, so its layers read two different target KV caches. Head dims are 32
for both layer types; the full-attention head dim must be given explicitly (`global_head_dim`) or
Gemma4TextConfig defaults it to 512, and the drafter's K/V heads and head dims must equal the target's
because it reads the target's cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mtpbench.training.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE

if TYPE_CHECKING:
    from transformers import Gemma4AssistantConfig, Gemma4TextConfig


@dataclass(frozen=True)
class TargetShape:
    """Size knobs of the target; the defaults are the shipped pair's."""

    hidden_size: int = 192
    intermediate_size: int = 768
    num_sliding_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    sliding_window: int = 64
    max_position_embeddings: int = 1024


@dataclass(frozen=True)
class DrafterShape:
    """Size knobs of the drafter; attention heads must match the target's KV layout."""

    hidden_size: int = 128
    intermediate_size: int = 512
    num_heads: int = 4
    # A full-attention layer first, then two sliding, then the full one Gemma4 requires last. This tiny
    # drafter takes most of what its attention adds in its first layer (offline, reading the wrong cache
    # there costs 6-8 points at pos0, in a later layer 2-4), so with Gemma4's usual 3 sliding + 1 full the
    # KV-group flattening fault bit in one group order only (-38 vs -4 points in vLLM). With this order
    # each group order mis-binds two layers, one of them the first: -20 points either way.
    layer_types: tuple[str, ...] = ("full_attention", "sliding_attention", "sliding_attention", "full_attention")


def _layer_types(num_sliding: int) -> list[str]:
    # Gemma4 requires the last layer to be full attention; everything before it slides.
    return ["sliding_attention"] * num_sliding + ["full_attention"]


def target_config(shape: TargetShape = TargetShape()) -> Gemma4TextConfig:
    """`Gemma4TextConfig` for `Gemma4ForCausalLM`: no per-layer inputs (PLE off), tied embeddings."""
    from transformers import Gemma4TextConfig

    cfg = Gemma4TextConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_sliding_layers + 1,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        global_head_dim=shape.head_dim,
        layer_types=_layer_types(shape.num_sliding_layers),
        sliding_window=shape.sliding_window,
        vocab_size_per_layer_input=0,
        hidden_size_per_layer_input=0,
        max_position_embeddings=shape.max_position_embeddings,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        tie_word_embeddings=True,
    )
    cfg.architectures = ["Gemma4ForCausalLM"]
    return cfg


def assistant_config(target: Gemma4TextConfig, shape: DrafterShape = DrafterShape()) -> Gemma4AssistantConfig:
    """`Gemma4AssistantConfig` for a drafter that reads `target`'s KV cache (all layers KV-shared)."""
    from transformers import Gemma4AssistantConfig, Gemma4TextConfig

    text = Gemma4TextConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=len(shape.layer_types),
        num_attention_heads=shape.num_heads,
        # K/V come from the target's cache, so their layout is the target's.
        num_key_value_heads=target.num_key_value_heads,
        head_dim=target.head_dim,
        global_head_dim=target.per_layer_config[target.num_hidden_layers - 1].head_dim,
        layer_types=list(shape.layer_types),
        sliding_window=target.sliding_window,
        rope_parameters=target.rope_parameters,
        vocab_size_per_layer_input=0,
        hidden_size_per_layer_input=0,
        max_position_embeddings=target.max_position_embeddings,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        tie_word_embeddings=True,
    )
    cfg = Gemma4AssistantConfig(text_config=text, backbone_hidden_size=target.hidden_size)
    cfg.architectures = ["Gemma4AssistantForCausalLM"]
    return cfg
