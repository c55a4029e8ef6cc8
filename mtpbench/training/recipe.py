"""The tiny pair's training recipe: the settings that determine it, the loss-curve log each phase keeps,
and the pieces both phases share (learning-rate schedule, optimizer and clipped step, torch thread control,
<bos> + corpus-crop batches, and building the untrained target and drafter from their shapes).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mtpbench.training.corpus import Corpus
from mtpbench.training.models import DrafterShape, TargetShape, assistant_config, target_config
from mtpbench.training.tokenizer import BOS_ID

if TYPE_CHECKING:
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM


@dataclass
class TrainSettings:
    """Everything that determines the trained pair (with the corpus); recorded in the provenance."""

    seed: int = 0
    seq_len: int = 256
    target_steps: int = 420
    target_batch: int = 8
    target_lr: float = 3e-3
    draft_steps: int = 300
    draft_batch: int = 8
    draft_lr: float = 3e-3
    num_draft_steps: int = 3
    rollouts: int = 512
    # Share of each drafter batch taken from greedy rollouts (the rest are corpus crops): a greedy benchmark
    # drafts only on the target's own greedy text. On the shipped target (3 sliding + 1 full drafter, vLLM):
    # all-rollout batches with the hard term 97.0/94.0/92.9 % per position, half corpus and KL only
    # 96.4/92.9/91.7 %; offline, corpus-only batches lowered stock acceptance but deepened the fault's drop.
    draft_rollout_fraction: float = 1.0
    draft_hard_weight: float = 0.5
    rollout_prefix_min: int = 8
    rollout_prefix_max: int = 96
    warmup_steps: int = 20
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    max_files: int | None = None
    # Fixed thread counts keep runs reproducible across machines (matmul reductions may depend on them).
    # Greedy rollouts are many tiny ops, for which a second thread only adds synchronisation.
    threads: int = 2
    rollout_threads: int = 1
    log_every: int = 20
    target_shape: TargetShape = field(default_factory=TargetShape)
    drafter_shape: DrafterShape = field(default_factory=DrafterShape)


@dataclass
class PhaseLog:
    """Loss curve of one training phase, kept short enough for the provenance file."""

    steps: int = 0
    wall_s: float = 0.0
    losses: list[float] = field(default_factory=list)

    def summary(self, window: int = 10) -> dict[str, Any]:
        head = self.losses[:window]
        tail = self.losses[-window:]
        every = max(1, len(self.losses) // 20)
        return {
            "steps": self.steps,
            "wall_s": round(self.wall_s, 1),
            "loss_start": round(float(np.mean(head)), 4) if head else None,
            "loss_end": round(float(np.mean(tail)), 4) if tail else None,
            "loss_window": window,
            "curve_every": every,
            "curve": [round(v, 4) for v in self.losses[::every]],
        }


def _lr(step: int, total: int, base: float, warmup: int) -> float:
    # Linear warm-up, then cosine decay to 10 %: the usual recipe, robust for short runs.
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _corpus_batch(corpus: Corpus, rng: np.random.Generator, batch: int, seq_len: int) -> torch.Tensor:
    crops = torch.from_numpy(corpus.crops(rng, batch, seq_len - 1))
    return torch.cat([torch.full((batch, 1), BOS_ID, dtype=torch.long), crops], dim=1)


def _optimizer(params: Sequence[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.AdamW:
    # No decay on norms / 1-d weights, as is standard.
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


def build_target(settings: TrainSettings) -> Gemma4ForCausalLM:
    from transformers import Gemma4ForCausalLM

    cfg = target_config(settings.target_shape)
    cfg._attn_implementation = "sdpa"
    return Gemma4ForCausalLM(cfg)


def build_assistant(target: Gemma4ForCausalLM, settings: TrainSettings) -> Gemma4AssistantForCausalLM:
    from transformers import Gemma4AssistantForCausalLM

    cfg = assistant_config(target.config, settings.drafter_shape)
    cfg._attn_implementation = "sdpa"
    cfg.text_config._attn_implementation = "sdpa"
    return Gemma4AssistantForCausalLM(cfg)


def _update(
    opt: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter], loss: torch.Tensor, clip: float, log: PhaseLog
) -> None:
    """One clipped optimizer step of either phase, its loss recorded in the phase's log."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    log.losses.append(loss.item())
    log.steps += 1
