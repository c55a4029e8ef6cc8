"""vLLM's Gemma4 MTP draft semantics, offline: what the target hands the drafter (final-normed hidden states
and the shared K/V of its last layer of each type, plus its logits as the teacher), the chained draft steps
from a fixed position p, the distillation loss, greedy per-position acceptance (stock and under the
`flatten-draft-metadata` fault's two orders) and the target's greedy rollouts the drafter trains on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from mtpbench.training.corpus import Corpus
from mtpbench.training.recipe import PairSettings, _corpus_batch, _torch_threads
from mtpbench.training.tokenizer import PAD_ID

if TYPE_CHECKING:
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM


@dataclass
class TargetFeatures:
    """What vLLM hands the drafter from the target's pass, plus the target's logits (the teacher)."""

    hidden: torch.Tensor  # [B, L, H] after the final norm
    shared_kv: dict[str, tuple[torch.Tensor, torch.Tensor]]  # layer type -> K, V [B, kv_heads, L, d]
    logits: torch.Tensor  # [B, L, V]


@torch.no_grad()
def target_features(target: Gemma4ForCausalLM, ids: torch.Tensor) -> TargetFeatures:
    out = target.model(input_ids=ids, return_shared_kv_states=True)
    # shared_kv_states holds the K/V of the last non-shared layer of each type: the very layers vLLM's
    # Gemma4Proposer wires the drafter to (`_setup_gemma4_kv_sharing`).
    shared = {k: (v[0], v[1]) for k, v in out.shared_kv_states.items()}
    return TargetFeatures(hidden=out.last_hidden_state, shared_kv=shared, logits=target.lm_head(out.last_hidden_state))


def draft_chain(
    target: Gemma4ForCausalLM,
    assistant: Gemma4AssistantForCausalLM,
    ids: torch.Tensor,
    feats: TargetFeatures,
    num_steps: int,
) -> list[torch.Tensor]:
    """Drafter logits of steps 1..num_steps for every start position p in [0, L-1-num_steps].

    Returns one [B, L - num_steps, V] tensor per step; entry p of step j predicts the token at p+j+1.
    """
    length = ids.shape[1] - num_steps
    positions = torch.arange(length).unsqueeze(0).expand(ids.shape[0], -1)
    # Queries sit at positions 0..length-1 and may only see keys at or before them, so the K/V beyond
    # `length` are never visible: slicing them off makes the square causal masks the model builds exact.
    shared = {k: (kv[0][:, :, :length], kv[1][:, :, :length]) for k, kv in feats.shared_kv.items()}
    # The target's embedding module already multiplies by sqrt(target hidden), as vLLM's normalizer does.
    embed = target.model.embed_tokens
    backbone = feats.hidden[:, :length]
    out: list[torch.Tensor] = []
    for j in range(1, num_steps + 1):
        tok = embed(ids[:, j : j + length])
        x = assistant.pre_projection(torch.cat([tok, backbone], dim=-1))
        hidden = assistant.model(
            inputs_embeds=x, position_ids=positions, shared_kv_states=dict(shared)
        ).last_hidden_state
        out.append(assistant.lm_head(hidden))
        backbone = assistant.post_projection(hidden)
    return out


@torch.no_grad()
def greedy_rollouts(
    target: torch.nn.Module, corpus: Corpus, rng: np.random.Generator, settings: PairSettings
) -> torch.Tensor:
    """The target's greedy continuations of short corpus prefixes, each `seq_len` tokens long (any causal LM
    with `generate`: the Gemma4, Llama and DeepSeek targets)."""
    with _torch_threads(settings.rollout_threads):
        return _greedy_rollouts(target, corpus, rng, settings)


def _greedy_rollouts(
    target: torch.nn.Module, corpus: Corpus, rng: np.random.Generator, settings: PairSettings
) -> torch.Tensor:
    chunk = 64
    seqs: list[torch.Tensor] = []
    for start in range(0, settings.rollouts, chunk):
        n = min(chunk, settings.rollouts - start)
        prefix_len = int(rng.integers(settings.rollout_prefix_min, settings.rollout_prefix_max + 1))
        prefix = _corpus_batch(corpus, rng, n, prefix_len)
        new = settings.seq_len - prefix_len
        seq = target.generate(
            input_ids=prefix,
            attention_mask=torch.ones_like(prefix),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=PAD_ID,
        )
        seqs.append(seq[:, : settings.seq_len])
    return torch.cat(seqs)


def _draft_loss(steps: list[torch.Tensor], teacher: torch.Tensor, hard_weight: float = 0.0) -> torch.Tensor:
    """KL(target || drafter) per draft step, plus optionally cross-entropy on the target's greedy token.

    Step j at p is matched with the target's logits at p+j. Greedy acceptance only needs the argmax to
    agree, which the hard term aims at directly; the KL term carries the richer signal.
    """
    length = steps[0].shape[1]
    losses = [step_loss(logits, teacher[:, j : j + length], hard_weight) for j, logits in enumerate(steps, start=1)]
    return torch.stack(losses).mean()


def step_loss(logits: torch.Tensor, teacher: torch.Tensor, hard_weight: float) -> torch.Tensor:
    """One draft step's distillation loss: KL(target || drafter) over the aligned positions, plus hard_weight
    x cross-entropy on the target's greedy token (every trainer's step loss: the pair's drafter, the heads)."""
    t = teacher.float().reshape(-1, teacher.shape[-1])
    q = F.log_softmax(logits.float().reshape(-1, logits.shape[-1]), dim=-1)
    loss = F.kl_div(q, F.log_softmax(t, dim=-1), log_target=True, reduction="batchmean")
    if hard_weight:
        loss = loss + hard_weight * F.nll_loss(q, t.argmax(-1))
    return loss


@torch.no_grad()
def offline_acceptance(steps: list[torch.Tensor], teacher: torch.Tensor) -> list[float]:
    """Greedy per-position acceptance if a draft started at every position (vLLM's unconditional rate)."""
    length = steps[0].shape[1]
    ok = torch.ones_like(steps[0][..., 0], dtype=torch.bool)
    rates: list[float] = []
    for j, logits in enumerate(steps, start=1):
        ok = ok & (logits.argmax(-1) == teacher[:, j : j + length].argmax(-1))
        rates.append(float(ok.float().mean()))
    return rates


# What the drafter's layers read when vLLM binds them all to one KV-cache group's attention metadata (the
# `flatten-draft-metadata` fault): with the last sliding target layer's group first, the full-attention draft
# layer walks that group's blocks (the sliding layer's K/V, CPU block tables share one pool); with the full
# group first, the sliding draft layers read the full layer's K/V through their window. An approximation
# (vLLM also drops out-of-window sliding blocks; rejected drafts change where later drafts start), kept
# to see before any engine runs whether a drafter leans on both of its layer types.
FAULT_ORDERS = {"sliding_first": "sliding_attention", "full_first": "full_attention"}


def flattened_features(feats: TargetFeatures, winner: str) -> TargetFeatures:
    """`feats` as the drafter sees them when every draft layer reads the `winner` layer type's cache."""
    kv = feats.shared_kv[winner]
    return TargetFeatures(hidden=feats.hidden, shared_kv=dict.fromkeys(feats.shared_kv, kv), logits=feats.logits)


@torch.no_grad()
def heldout_acceptance(
    target: Gemma4ForCausalLM, assistant: Gemma4AssistantForCausalLM, ids: torch.Tensor, num_steps: int
) -> dict[str, list[float]]:
    """Offline per-position acceptance on `ids`: stock and under each order of the flattening fault."""
    feats = target_features(target, ids)
    seen = {"stock": feats, **{order: flattened_features(feats, winner) for order, winner in FAULT_ORDERS.items()}}
    return {
        name: offline_acceptance(draft_chain(target, assistant, ids, f, num_steps), feats.logits)
        for name, f in seen.items()
    }


def _cat_features(parts: Sequence[TargetFeatures]) -> TargetFeatures:
    kinds = parts[0].shared_kv.keys()
    return TargetFeatures(
        hidden=torch.cat([f.hidden for f in parts]),
        shared_kv={
            k: (torch.cat([f.shared_kv[k][0] for f in parts]), torch.cat([f.shared_kv[k][1] for f in parts]))
            for k in kinds
        },
        logits=torch.cat([f.logits for f in parts]),
    )


def _take_features(feats: TargetFeatures, idx: torch.Tensor) -> TargetFeatures:
    return TargetFeatures(
        hidden=feats.hidden[idx],
        shared_kv={k: (kv[0][idx], kv[1][idx]) for k, kv in feats.shared_kv.items()},
        logits=feats.logits[idx],
    )


@torch.no_grad()
def pool_features(target: Gemma4ForCausalLM, ids: torch.Tensor, chunk: int = 32) -> TargetFeatures:
    """Target features of every rollout, computed once: the frozen target gives the same answer each time."""
    return _cat_features([target_features(target, ids[i : i + chunk]) for i in range(0, len(ids), chunk)])
