"""The tiny Llama pair for the `draft_model` method (and the target the EAGLE heads are trained on): shapes,
settings and the two phases.

The target (`LlamaForCausalLM`, one KV-cache group: vLLM's draft-model proposer refuses a target whose
layers span two) learns next-byte prediction with the Gemma4 target's own loop (phases.train_target) on the
same corpus and byte tokenizer. The draft model is a smaller `LlamaForCausalLM` sharing that tokenizer; in
vLLM it runs as an ordinary language model over the verified text, with its own KV cache, and drafts its own
greedy continuation. So it is distilled teacher-forced on the target's greedy rollouts: at every position its
next-token distribution is pulled towards the target's (KL, plus cross-entropy on the target's argmax).
Teacher forcing is exact for greedy acceptance: draft j+1 is only counted after drafts 1..j equalled the
target's tokens, so it is conditioned on the very text the rollout holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from mtpbench.reference import sliding_llama
from mtpbench.reference.sliding_llama import SLIDING
from mtpbench.training.corpus import Corpus
from mtpbench.training.drafting import greedy_rollouts
from mtpbench.training.phases import round_to_bf16_, train_target
from mtpbench.training.recipe import PairSettings, PhaseLog, _torch_threads, run_phase
from mtpbench.training.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE

if TYPE_CHECKING:
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel


logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LlamaShape:
    """Size knobs of one tiny Llama; the defaults are the shipped target's."""

    hidden_size: int = 192
    intermediate_size: int = 768
    # At least 4: vLLM's default EAGLE-3 auxiliary layers are (2, n // 2, n - 3), distinct only from n = 4 on.
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    max_position_embeddings: int = 1024
    # Every layer attends through a window shorter than the training crops (seq_len 256): the target then meets
    # in training every context a long request shows it. With full attention it wrote noise past 256 bytes and
    # its drafters accepted 72-79 % at pos0 on HumanEval (docs/tiny-pair.md). None: full attention.
    sliding_window: int | None = 128


# The draft model slides through the target's window: vLLM gives it that window anyway (an all-sliding target's
# window is the engine's, CacheConfig.sliding_window, and every layer without one of its own takes it:
# mtpbench/reference/sliding_llama.py), so it is trained that way and its config says so.
DRAFT_SHAPE = LlamaShape(hidden_size=128, intermediate_size=512, num_layers=2, num_heads=4, num_kv_heads=2)


@dataclass
class LlamaSettings(PairSettings):
    """Everything that determines the tiny Llama pair (with the corpus); recorded in the provenance. The
    target phase and the rollouts read the shared recipe's knobs (PairSettings) with the Gemma4 pair's values."""

    draft_steps: int = 600
    # The drafter's rollouts are as long as a benchmark's requests (HumanEval prompts of up to 800 bytes plus
    # 128 generated tokens): a drafter trained only on the target's 256-token crops met positions it had never
    # seen and drafted 62.6 % at pos0 on 20 HumanEval prompts (offline replay), against 96 % on short rollouts.
    # The shared recipe's rollout prefix (rollout_prefix_*) is the target phase's; the drafter's own rollouts
    # use these.
    draft_seq_len: int = 768
    draft_prefix_min: int = 256
    draft_prefix_max: int = 608
    num_eval_steps: int = 3
    target_shape: LlamaShape = field(default_factory=LlamaShape)
    drafter_shape: LlamaShape = DRAFT_SHAPE


def llama_config(shape: LlamaShape) -> LlamaConfig:
    """`LlamaConfig` over the byte tokenizer, tied embeddings, head dim hidden / heads."""
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=shape.max_position_embeddings,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        tie_word_embeddings=True,
    )
    if shape.sliding_window is not None:
        # What vLLM's LlamaAttention reads (mtpbench/reference/sliding_llama.py).
        cfg.layer_types = [SLIDING] * shape.num_layers
        cfg.sliding_window = shape.sliding_window
    cfg.architectures = ["LlamaForCausalLM"]
    cfg._attn_implementation = "sdpa"
    return cfg


def build_llama(shape: LlamaShape) -> PreTrainedModel:
    """An untrained Llama of `shape` (its sliding twin when its layers slide)."""
    return sliding_llama.twin(llama_config(shape))


@dataclass
class LlamaResult:
    target: LlamaForCausalLM
    drafter: LlamaForCausalLM | None
    target_log: PhaseLog
    draft_log: PhaseLog
    rollout_wall_s: float
    offline_acceptance: list[float]
    corpus: dict[str, object]


@torch.no_grad()
def _teacher_logits(target: LlamaForCausalLM, ids: torch.Tensor, chunk: int = 32) -> torch.Tensor:
    """The frozen target's logits over every rollout, computed once (bf16 to halve the pool's memory)."""
    parts = [target(input_ids=ids[i : i + chunk]).logits.to(torch.bfloat16) for i in range(0, len(ids), chunk)]
    return torch.cat(parts)


def distill_loss(student: torch.Tensor, teacher: torch.Tensor, hard_weight: float) -> torch.Tensor:
    """KL(target || drafter) per position, plus `hard_weight` x cross-entropy on the target's greedy token."""
    q = F.log_softmax(student.float().reshape(-1, student.shape[-1]), dim=-1)
    t = teacher.float().reshape(-1, teacher.shape[-1])
    loss = F.kl_div(q, F.log_softmax(t, dim=-1), log_target=True, reduction="batchmean")
    if hard_weight:
        loss = loss + hard_weight * F.nll_loss(q, t.argmax(-1))
    return loss


@torch.no_grad()
def offline_acceptance(student: torch.Tensor, teacher: torch.Tensor, num_steps: int) -> list[float]:
    """Greedy per-position acceptance if a k-token draft started at every position (unconditional rate).

    Teacher-forced argmax agreement: position j counts when the drafter's argmax equals the target's at
    p+1..p+j, which is exactly when its own greedy continuation would have been accepted that far.
    """
    agree = student.argmax(-1) == teacher.argmax(-1)  # [B, L]
    length = agree.shape[1] - num_steps + 1
    ok = torch.ones_like(agree[:, :length])
    rates: list[float] = []
    for j in range(num_steps):
        ok = ok & agree[:, j : j + length]
        rates.append(float(ok.float().mean()))
    return rates


def train_drafter(
    drafter: LlamaForCausalLM,
    rollouts: torch.Tensor,
    teacher: torch.Tensor,
    rng: np.random.Generator,
    settings: LlamaSettings,
) -> PhaseLog:
    params = [p for p in drafter.parameters() if p.requires_grad]

    def step() -> tuple[torch.Tensor, Callable[[], list[float]]]:
        pick = torch.from_numpy(rng.integers(0, len(rollouts), size=settings.draft_batch))
        logits = drafter(input_ids=rollouts[pick]).logits
        loss = distill_loss(logits, teacher[pick], settings.draft_hard_weight)
        return loss, lambda: offline_acceptance(logits, teacher[pick], settings.num_eval_steps)

    drafter.train()
    log = run_phase("draft", params, settings.draft_steps, settings.draft_lr, settings, step)
    drafter.eval()
    return log


def train_llama_pair(settings: LlamaSettings, target_dir: Path | None = None, with_drafter: bool = True) -> LlamaResult:
    """Train the target (or load the saved one in `target_dir`), then distil the draft model from it."""
    with _torch_threads(settings.threads):
        return _train_llama_pair(settings, target_dir, with_drafter)


def _train_llama_pair(settings: LlamaSettings, target_dir: Path | None, with_drafter: bool) -> LlamaResult:
    corpus = Corpus.load(max_files=settings.max_files)
    logger.info("corpus: %d files, %d bytes", corpus.num_files, len(corpus.data))
    if target_dir is None:
        torch.manual_seed(settings.seed)
        target = build_llama(settings.target_shape)
        target_log = train_target(target, corpus, np.random.default_rng(settings.seed), settings)
        round_to_bf16_(target)
    else:
        target, target_log = load_llama(target_dir, settings.target_shape), PhaseLog()
    if not with_drafter:
        return LlamaResult(target, None, target_log, PhaseLog(), 0.0, [], corpus.describe())
    for p in target.parameters():
        p.requires_grad_(False)

    # The drafter phase draws from its own seeds, so a drafter-only run on a saved target (`--target`)
    # trains the very drafter a full run would.
    torch.manual_seed(settings.seed + 1)
    t0 = time.perf_counter()
    long = replace(
        settings,
        seq_len=settings.draft_seq_len,
        rollout_prefix_min=settings.draft_prefix_min,
        rollout_prefix_max=settings.draft_prefix_max,
    )
    rollouts = greedy_rollouts(target, corpus, np.random.default_rng([settings.seed, 1]), long)
    teacher = _teacher_logits(target, rollouts)
    rollout_wall_s = time.perf_counter() - t0
    logger.info("%d greedy rollouts in %.0fs", len(rollouts), rollout_wall_s)

    drafter = build_llama(settings.drafter_shape)
    draft_log = train_drafter(drafter, rollouts, teacher, np.random.default_rng([settings.seed, 2]), settings)
    round_to_bf16_(drafter)

    # Held-out check on fresh rollouts: what a greedy benchmark should see, before any engine runs.
    held_out = greedy_rollouts(target, corpus, np.random.default_rng(settings.seed + 1), replace(long, rollouts=64))
    with torch.no_grad():
        acc = offline_acceptance(drafter(input_ids=held_out).logits, target(input_ids=held_out).logits, 3)
    logger.info("held-out rollout acceptance per position: %s", "/".join(f"{a:.3f}" for a in acc))
    return LlamaResult(target, drafter, target_log, draft_log, rollout_wall_s, acc, corpus.describe())


def load_llama(path: Path, shape: LlamaShape) -> LlamaForCausalLM:
    """A Llama saved by an earlier run (bf16 on disk, float32 in memory: exactly the trained values)."""
    if not (path / "config.json").is_file():
        raise SystemExit(f"--target {path}: no config.json (expected a target/ folder saved by this trainer)")
    model = sliding_llama.load(path, torch.float32)
    expected = llama_config(shape).to_dict()
    got = model.config.to_dict()
    keys = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_key_value_heads",
        "vocab_size",
        "sliding_window",
    )
    wrong = [k for k in keys if got.get(k) != expected.get(k)]
    if wrong:
        raise SystemExit(f"--target {path}: {', '.join(wrong)} differ from the target shape of these settings")
    return model
