"""The two training phases and the run that chains them: the target learns next-byte prediction and is
rounded to bf16; the drafter is distilled from the frozen target on its greedy rollouts; `train_pair` runs
both (or only the drafter's, on a saved target read by `load_target`) and checks held-out acceptance.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from mtpbench.training.corpus import Corpus
from mtpbench.training.drafting import (
    _cat_features,
    _draft_loss,
    _take_features,
    draft_chain,
    greedy_rollouts,
    heldout_acceptance,
    offline_acceptance,
    pool_features,
    target_features,
)
from mtpbench.training.models import target_config
from mtpbench.training.recipe import (
    PairSettings,
    PhaseLog,
    TrainSettings,
    _corpus_batch,
    _torch_threads,
    build_assistant,
    build_target,
    run_phase,
)

if TYPE_CHECKING:
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM


logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    target: Gemma4ForCausalLM
    assistant: Gemma4AssistantForCausalLM
    target_log: PhaseLog
    draft_log: PhaseLog
    rollout_wall_s: float
    offline_acceptance: dict[str, list[float]]  # stock and each flattening-fault order (see FAULT_ORDERS)
    corpus: dict[str, object]


def train_target(target: torch.nn.Module, corpus: Corpus, rng: np.random.Generator, settings: PairSettings) -> PhaseLog:
    """Next-byte cross-entropy (nats/byte) on <bos> + line-aligned corpus crops (any causal LM: the Gemma4,
    Llama and DeepSeek targets all learn this way)."""
    params = [p for p in target.parameters() if p.requires_grad]

    def step() -> tuple[torch.Tensor, None]:
        ids = _corpus_batch(corpus, rng, settings.target_batch, settings.seq_len)
        logits = target(input_ids=ids).logits[:, :-1]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)), None

    target.train()
    log = run_phase("target", params, settings.target_steps, settings.target_lr, settings, step)
    target.eval()
    return log


@torch.no_grad()
def round_to_bf16_(model: torch.nn.Module) -> None:
    """Round weights to bf16 in place (kept in fp32) so the drafter learns the target that ships."""
    for p in model.parameters():
        p.copy_(p.to(torch.bfloat16).to(p.dtype))


def train_drafter(
    target: Gemma4ForCausalLM,
    assistant: Gemma4AssistantForCausalLM,
    corpus: Corpus,
    rollouts: torch.Tensor,
    rng: np.random.Generator,
    settings: TrainSettings,
) -> PhaseLog:
    for p in target.parameters():
        p.requires_grad_(False)
    pool = pool_features(target, rollouts)
    # vLLM replaces the drafter's embed_tokens by the target's, so only lm_head's tied copy of it is used.
    params = [p for p in assistant.parameters() if p.requires_grad]
    n_roll = round(settings.draft_batch * settings.draft_rollout_fraction)
    n_corpus = settings.draft_batch - n_roll

    def step() -> tuple[torch.Tensor, Callable[[], list[float]]]:
        pick = torch.from_numpy(rng.integers(0, len(rollouts), size=n_roll))
        ids, feats = rollouts[pick], _take_features(pool, pick)
        if n_corpus:
            extra = _corpus_batch(corpus, rng, n_corpus, settings.seq_len)
            ids = torch.cat([ids, extra])
            feats = _cat_features([feats, target_features(target, extra)])
        steps = draft_chain(target, assistant, ids, feats, settings.num_draft_steps)
        shown = n_roll or settings.draft_batch
        return _draft_loss(steps, feats.logits, settings.draft_hard_weight), lambda: offline_acceptance(
            [s[:shown] for s in steps], feats.logits[:shown]
        )

    assistant.train()
    log = run_phase("draft", params, settings.draft_steps, settings.draft_lr, settings, step)
    assistant.eval()
    return log


def train_pair(settings: TrainSettings, target_dir: Path | None = None) -> TrainResult:
    """Run both phases (or only the drafter's, on the target saved in `target_dir`); deterministic for a given
    settings + corpus + torch build."""
    with _torch_threads(settings.threads):
        return _train_pair(settings, target_dir)


def _train_pair(settings: TrainSettings, target_dir: Path | None = None) -> TrainResult:
    corpus = Corpus.load(max_files=settings.max_files)
    logger.info("corpus: %d files, %d bytes", corpus.num_files, len(corpus.data))

    if target_dir is None:
        torch.manual_seed(settings.seed)
        target = build_target(settings)
        target_log = train_target(target, corpus, np.random.default_rng(settings.seed), settings)
        round_to_bf16_(target)
    else:
        target, target_log = load_target(target_dir, settings)

    # The drafter phase draws from its own seeds, not from whatever the target phase left in the generators,
    # so retraining only the drafter from a saved target (`--target`) gives the same drafter as a full run.
    torch.manual_seed(settings.seed + 1)
    t0 = time.perf_counter()
    rollouts = greedy_rollouts(target, corpus, np.random.default_rng([settings.seed, 1]), settings)
    rollout_wall_s = time.perf_counter() - t0
    logger.info("%d greedy rollouts in %.0fs", len(rollouts), rollout_wall_s)

    assistant = build_assistant(target, settings)
    draft_log = train_drafter(target, assistant, corpus, rollouts, np.random.default_rng([settings.seed, 2]), settings)
    round_to_bf16_(assistant)

    # Held-out check on fresh rollouts: what a greedy benchmark should see, before any engine runs.
    eval_settings = replace(settings, rollouts=64)
    held_out = greedy_rollouts(target, corpus, np.random.default_rng(settings.seed + 1), eval_settings)
    acc = heldout_acceptance(target, assistant, held_out, settings.num_draft_steps)
    for name, rates in acc.items():
        logger.info("held-out rollout acceptance per position, %s: %s", name, "/".join(f"{a:.3f}" for a in rates))
    return TrainResult(target, assistant, target_log, draft_log, rollout_wall_s, acc, corpus.describe())


def load_target(target_dir: Path, settings: TrainSettings) -> tuple[Gemma4ForCausalLM, PhaseLog]:
    """A target saved by an earlier run (bf16 on disk, so float32 in memory holds exactly the trained values).

    Its shape must be the one `settings` describes: the drafter is built against it. The phase log is
    empty (no steps here); the earlier run's provenance, if next to it, is carried into the new one.
    """
    from transformers import Gemma4ForCausalLM

    config = target_dir / "config.json"
    if not config.is_file():
        raise SystemExit(f"--target {target_dir}: no config.json (expected a target/ folder saved by this trainer)")
    target = Gemma4ForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    expected = target_config(settings.target_shape).to_dict()
    got = target.config.to_dict()
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "layer_types", "sliding_window", "vocab_size")
    wrong = [k for k in keys if got.get(k) != expected.get(k)]
    if wrong:
        raise SystemExit(f"--target {target_dir}: {', '.join(wrong)} differ from the target shape of these settings")
    return target, PhaseLog()
