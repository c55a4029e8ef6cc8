"""The tiny pairs' training recipe: the settings every trainer here shares (`RecipeSettings`, and
`PairSettings` for the two-phase target + drafter trainers), the loss-curve log each phase keeps, and the
pieces every phase shares: one optimisation loop (`run_phase`: AdamW, warm-up + cosine learning rate, a clipped
step, the loss curve and the log line), torch thread control, <bos> + corpus-crop batches, and building the
untrained Gemma4 target and drafter from their shapes.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
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

logger = logging.getLogger(__name__)


@dataclass
class RecipeSettings:
    """The knobs every trainer here shares (the Gemma4, Llama and DeepSeek pairs, the EAGLE heads); each
    trainer's settings add their own, and the whole is recorded in the provenance."""

    seed: int = 0
    warmup_steps: int = 20
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    max_files: int | None = None
    # Fixed thread counts keep runs reproducible across machines (matmul reductions may depend on them).
    # Greedy rollouts are many tiny ops, for which a second thread only adds synchronisation.
    threads: int = 2
    rollout_threads: int = 1
    log_every: int = 20


@dataclass
class PairSettings(RecipeSettings):
    """A target trained on corpus crops and a drafter distilled on its greedy rollouts: the knobs of the
    target phase (phases.train_target) and of the rollouts (drafting.greedy_rollouts) both pairs share."""

    seq_len: int = 256
    target_steps: int = 420
    target_batch: int = 8
    target_lr: float = 3e-3
    draft_steps: int = 300
    draft_batch: int = 8
    draft_lr: float = 3e-3
    rollouts: int = 512
    draft_hard_weight: float = 0.5
    rollout_prefix_min: int = 8
    rollout_prefix_max: int = 96


@dataclass
class TrainSettings(PairSettings):
    """Everything that determines the Gemma4 pair (with the corpus); recorded in the provenance."""

    num_draft_steps: int = 3
    # Share of each drafter batch taken from greedy rollouts (the rest are corpus crops): a greedy benchmark
    # drafts only on the target's own greedy text. On the shipped target (3 sliding + 1 full drafter, vLLM):
    # all-rollout batches with the hard term 97.0/94.0/92.9 % per position, half corpus and KL only
    # 96.4/92.9/91.7 %; offline, corpus-only batches lowered stock acceptance but deepened the fault's drop.
    draft_rollout_fraction: float = 1.0
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
    """One clipped optimizer step of any phase, its loss recorded in the phase's log."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    log.losses.append(loss.item())
    log.steps += 1


# One training step of a phase: draw the batch, return its loss and, where the phase has one, a function
# giving the batch's per-position acceptance for the log line (called only on the steps that log).
PhaseStep = Callable[[], tuple[torch.Tensor, Callable[[], list[float]] | None]]


def run_phase(
    name: str, params: Sequence[torch.nn.Parameter], steps: int, lr: float, settings: RecipeSettings, step: PhaseStep
) -> PhaseLog:
    """The loop every phase of every trainer here runs: AdamW (no decay on 1-d weights), linear warm-up then
    cosine decay, `steps` clipped updates, each on the loss `step()` returns (its batch drawn from the
    phase's generator in the order the call makes its draws), the loss curve kept and a line logged every
    `log_every` steps. The caller puts the model in training mode before and back in eval mode after."""
    log = PhaseLog()
    opt = _optimizer(params, lr, settings.weight_decay)
    t0 = time.perf_counter()
    for index in range(steps):
        for group in opt.param_groups:
            group["lr"] = _lr(index, steps, lr, settings.warmup_steps)
        loss, acceptance = step()
        _update(opt, params, loss, settings.grad_clip, log)
        if index % settings.log_every == 0 or index + 1 == steps:
            shown = "" if acceptance is None else " rollout acceptance " + "/".join(f"{a:.3f}" for a in acceptance())
            logger.info(
                "%s step %d/%d loss %.4f%s (%.0fs)",
                name,
                index + 1,
                steps,
                loss.item(),
                shown,
                time.perf_counter() - t0,
            )
    log.wall_s = time.perf_counter() - t0
    return log
