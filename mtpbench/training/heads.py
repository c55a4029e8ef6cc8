"""Training an EAGLE head (EAGLE-1 or EAGLE-3) on a frozen tiny Llama target, the way vLLM runs it, and writing
it as a draft vLLM loads (config.json, model.safetensors) with its provenance.json. The entries
(mtpbench/training/eagle3.py, eagle1.py) say which head (`HeadKind`); everything else is here, once.

The head is mtpbench/reference/eagle.py's module (the reference replays the very module trained here).
Training-time test: every start of the target's greedy rollouts is drafted k = 3 chained steps exactly as the
engine chains them (step j > 1 at the next position, reading the previous step's output and attending the
teacher-forced KV plus its own chain's), and step j is pulled towards the target's distribution at s + j (KL,
plus cross-entropy on the target's argmax), on the target's own greedy continuations of corpus prefixes: the
text a greedy benchmark drafts on. Seeded, CPU-only, fixed thread counts: the same command writes the same
bytes.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mtpbench.reference import sliding_llama
from mtpbench.reference.eagle import EagleHead, HeadShape, chain_logits
from mtpbench.training.corpus import Corpus
from mtpbench.training.drafting import step_loss
from mtpbench.training.export import dir_size, run_facts
from mtpbench.training.phases import round_to_bf16_
from mtpbench.training.recipe import PhaseLog, RecipeSettings, _corpus_batch, _torch_threads, run_phase
from mtpbench.training.tokenizer import PAD_ID

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

logger = logging.getLogger(__name__)


@dataclass
class HeadSettings(RecipeSettings):
    """Everything that determines a head (with the target and the corpus); recorded in the provenance."""

    steps: int = 240
    batch: int = 8
    lr: float = 3e-3
    num_draft_steps: int = 3
    rollouts: int = 384
    hard_weight: float = 0.5
    # A benchmark prompt is up to ~930 tokens long and the engine drafts only on the 128 tokens the target
    # generates after it. An EAGLE-3 head trained on 256-token rollouts from short prefixes (96 at most)
    # reached 93 % pos0 offline but 60 % on HumanEval: past its training length the target writes
    # differently, so the rollouts here continue prefixes as long as the prompts, and the loss counts the
    # generated part.
    rollout_prefix_min: int = 32
    rollout_prefix_max: int = 800
    rollout_new_tokens: int = 128
    rollout_chunk: int = 32
    intermediate_size: int = 768


@dataclass(frozen=True)
class HeadKind:
    """One kind of head: its vLLM method, the folder it is written to, its entry's command, how it is built
    on the target (`build`: its initial weights drawn from torch's generator), its config.json, and what its
    provenance says of it."""

    method: str
    folder: str
    prog: str
    architecture: str
    what: str
    semantics: str
    build: Callable[[LlamaForCausalLM, HeadSettings], EagleHead]
    config: Callable[[HeadShape, dict[str, Any]], dict[str, Any]]
    facts: Callable[[HeadSettings], dict[str, Any]] = lambda _settings: {}


@dataclass
class HeadResult:
    head: EagleHead
    target_config: dict[str, Any]
    log: PhaseLog
    rollout_wall_s: float
    heldout_acceptance: list[float]
    corpus: dict[str, object]
    extra: dict[str, Any] = field(default_factory=dict)


def head_shape(target_config: dict[str, Any], settings: HeadSettings, aux_layer_ids: Sequence[int] = ()) -> HeadShape:
    """The head's shape from the target's: the same width, heads and vocabulary (vLLM asserts the fused
    state's width equals the embeddings', llama_eagle3.py line 270; EAGLE-1 shares the target's embeddings and
    lm_head, so its width is theirs)."""
    return HeadShape(
        hidden_size=int(target_config["hidden_size"]),
        intermediate_size=settings.intermediate_size,
        num_heads=int(target_config["num_attention_heads"]),
        num_kv_heads=int(target_config["num_key_value_heads"]),
        vocab_size=int(target_config["vocab_size"]),
        aux_layer_ids=tuple(aux_layer_ids),
        rms_norm_eps=float(target_config.get("rms_norm_eps", 1e-6)),
        rope_theta=float((target_config.get("rope_parameters") or {}).get("rope_theta", 10000.0)),
    )


def llama_head_config(
    shape: HeadShape, target_config: dict[str, Any], architecture: str, extra: dict[str, Any]
) -> dict[str, Any]:
    """config.json of a one-layer Llama head in the form vLLM loads for a draft; `extra` (EAGLE-3's draft
    vocabulary and auxiliary layers) goes after the vocabulary."""
    return {
        "architectures": [architecture],
        "model_type": "llama",
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_parameters": {"rope_theta": shape.rope_theta, "rope_type": "default"},
        "max_position_embeddings": int(target_config.get("max_position_embeddings", 1024)),
        "vocab_size": int(target_config["vocab_size"]),
        **extra,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": target_config.get("bos_token_id"),
        "eos_token_id": target_config.get("eos_token_id"),
        "pad_token_id": target_config.get("pad_token_id"),
        "dtype": "bfloat16",
    }


def step_losses(steps: list[torch.Tensor], teacher: torch.Tensor, hard_weight: float, first: int) -> torch.Tensor:
    """Mean over steps of KL(target || head) [+ hard_weight x CE on the target's argmax]; step j at start s
    is held to the target's logits at s + j, over the starts from `first` on (the last prefix position:
    the engine drafts from there; `steps` hold only those) where every step has a teacher."""
    k = len(steps)
    length = teacher.shape[1] - k
    losses = [
        step_loss(logits[:, : length - first], teacher[:, first + j : j + length], hard_weight)
        for j, logits in enumerate(steps, start=1)
    ]
    return torch.stack(losses).mean()


@torch.no_grad()
def chained_acceptance(steps: list[torch.Tensor], teacher: torch.Tensor, first: int) -> list[float]:
    """vLLM's unconditional per-position rate if a draft started at every position from `first` on (`steps`
    hold only those): step j counts when steps 1..j all equal the target's greedy tokens."""
    k = len(steps)
    length = teacher.shape[1] - k
    ok = torch.ones(teacher.shape[0], length - first, dtype=torch.bool)
    out = []
    for j, logits in enumerate(steps, start=1):
        ok = ok & (logits[:, : length - first].argmax(-1) == teacher[:, first + j : j + length].argmax(-1))
        out.append(float(ok.float().mean()))
    return out


@torch.no_grad()
def long_rollouts(
    target: LlamaForCausalLM, corpus: Corpus, rng: np.random.Generator, settings: HeadSettings, count: int
) -> list[tuple[torch.Tensor, int]]:
    """Chunks of the target's greedy continuations (`rollout_new_tokens` + k tokens) of corpus prefixes,
    one prefix length per chunk drawn from [rollout_prefix_min, rollout_prefix_max]: (ids, prefix length)."""
    out = []
    new = settings.rollout_new_tokens + settings.num_draft_steps
    with _torch_threads(settings.rollout_threads):
        for start in range(0, count, settings.rollout_chunk):
            n = min(settings.rollout_chunk, count - start)
            prefix_len = int(rng.integers(settings.rollout_prefix_min, settings.rollout_prefix_max + 1))
            prefix = _corpus_batch(corpus, rng, n, prefix_len)
            seq = target.generate(
                input_ids=prefix,
                attention_mask=torch.ones_like(prefix),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=PAD_ID,
            )
            out.append((seq, prefix_len))
    return out


def _chunk_forward(
    head: EagleHead, target: LlamaForCausalLM, ids: torch.Tensor, k: int, first: int
) -> tuple[list[torch.Tensor], torch.Tensor]:
    with torch.no_grad():
        states, teacher = head.target_states(target, ids)
    return chain_logits(head, target.model.embed_tokens, states, ids, k, first), teacher


def train_head(kind: HeadKind, settings: HeadSettings, target_dir: Path) -> HeadResult:
    with _torch_threads(settings.threads):
        return _train_head(kind, settings, target_dir)


def _train_head(kind: HeadKind, settings: HeadSettings, target_dir: Path) -> HeadResult:
    # Its sliding twin when the target's layers slide: the hidden states the engine hands the head.
    target = sliding_llama.load(target_dir, torch.float32)
    for p in target.parameters():
        p.requires_grad_(False)
    corpus = Corpus.load(max_files=settings.max_files)
    logger.info("corpus: %d files, %d bytes", corpus.num_files, len(corpus.data))
    torch.manual_seed(settings.seed)
    t0 = time.perf_counter()
    chunks = long_rollouts(target, corpus, np.random.default_rng([settings.seed, 1]), settings, settings.rollouts)
    rollout_wall_s = time.perf_counter() - t0
    logger.info("%d greedy rollouts in %.0fs", settings.rollouts, rollout_wall_s)

    head = kind.build(target, settings)
    # The window vLLM gives the head's attention over this target (reference/eagle.py's docstring): trained
    # through it, so the head learns what the engine runs.
    target_config = json.loads((target_dir / "config.json").read_text())
    head.window = sliding_llama.engine_window(target_config)
    params = [p for p in head.parameters() if p.requires_grad]
    rng = np.random.default_rng([settings.seed, 2])
    k = settings.num_draft_steps

    def step() -> tuple[torch.Tensor, Callable[[], list[float]]]:
        ids, prefix_len = chunks[int(rng.integers(0, len(chunks)))]
        ids = ids[torch.from_numpy(rng.integers(0, len(ids), size=settings.batch))]
        steps, teacher = _chunk_forward(head, target, ids, k, prefix_len - 1)
        loss = step_losses(steps, teacher, settings.hard_weight, prefix_len - 1)
        return loss, lambda: chained_acceptance(steps, teacher, prefix_len - 1)

    head.train()
    log = run_phase("head", params, settings.steps, settings.lr, settings, step)
    head.eval()
    round_to_bf16_(head)
    acc = _heldout_acceptance(head, target, corpus, settings)
    logger.info("held-out rollout acceptance per position: %s", "/".join(f"{a:.3f}" for a in acc))
    return HeadResult(head, target_config, log, rollout_wall_s, acc, corpus.describe())


def _heldout_acceptance(
    head: EagleHead, target: LlamaForCausalLM, corpus: Corpus, settings: HeadSettings
) -> list[float]:
    """Fresh rollouts' acceptance, pooled over their generated parts (each chunk weighted by its starts)."""
    held_out = long_rollouts(target, corpus, np.random.default_rng(settings.seed + 1), settings, 64)
    hits, starts = np.zeros(settings.num_draft_steps), 0
    with torch.no_grad():
        for ids, prefix_len in held_out:
            steps, teacher = _chunk_forward(head, target, ids, settings.num_draft_steps, prefix_len - 1)
            n = ids.shape[0] * (ids.shape[1] - settings.num_draft_steps - prefix_len + 1)
            hits += np.array(chained_acceptance(steps, teacher, prefix_len - 1)) * n
            starts += n
    return [float(a) for a in hits / starts]


def save_head(kind: HeadKind, result: HeadResult, out_dir: Path) -> Path:
    """config.json + model.safetensors (bf16; no embed_tokens: vLLM shares the target's)."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    config = kind.config(result.head.shape, result.target_config)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    state = {name: w.detach().to(torch.bfloat16).contiguous() for name, w in result.head.state_dict().items()}
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    return out_dir


def write_provenance(
    kind: HeadKind,
    result: HeadResult,
    settings: HeadSettings,
    target_dir: Path,
    out_dir: Path,
    command: str,
    started: datetime,
    total_s: float,
) -> Path:
    from mtpbench.weights import weights_sha256

    prov = {
        "what": kind.what,
        "command": command,
        "date": started.isoformat(timespec="seconds"),
        "seed": settings.seed,
        "settings": asdict(settings),
        "corpus": result.corpus,
        "target": {"path": str(target_dir), "weights_sha256": weights_sha256(target_dir)},
        "head": {
            "architecture": kind.architecture,
            "params": sum(p.numel() for p in result.head.parameters()),
            **kind.facts(settings),
            "loss_unit": "KL(target || head) + hard_weight * CE on the target's argmax, nats/token, mean over "
            "the chained draft steps",
            "semantics": kind.semantics,
            # The engine's window over this target (None: full attention), which the head was trained through.
            "attention_window": result.head.window,
            **result.log.summary(),
        },
        "rollouts_wall_s": round(result.rollout_wall_s, 1),
        "offline_heldout_acceptance_per_pos": [round(a, 4) for a in result.heldout_acceptance],
        **run_facts(total_s, {"head": dir_size(out_dir / kind.folder)}),
    }
    path = out_dir / kind.folder / "provenance.json"
    path.write_text(json.dumps(prov, indent=2) + "\n", encoding="utf-8")
    return path


def _parse(kind: HeadKind, defaults: HeadSettings, argv: Sequence[str] | None) -> tuple[argparse.Namespace, Any]:
    d = defaults
    ap = argparse.ArgumentParser(prog=kind.prog, description=f"Train the tiny {kind.method} head on a frozen target")
    ap.add_argument("--target", type=Path, required=True, help="the frozen tiny Llama target/ folder")
    ap.add_argument(
        "--out", type=Path, required=True, help=f"output dir (gets {kind.folder}/ with its provenance.json)"
    )
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--steps", type=int, default=d.steps)
    ap.add_argument("--batch", type=int, default=d.batch)
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--rollouts", type=int, default=d.rollouts)
    ap.add_argument("--prefix-max", type=int, default=d.rollout_prefix_max, help="longest rollout prefix")
    ap.add_argument("--new-tokens", type=int, default=d.rollout_new_tokens, help="greedy tokens per rollout")
    ap.add_argument("--max-files", type=int, default=None, help="use only the first N corpus files (tests)")
    ap.add_argument("--threads", type=int, default=d.threads)
    ap.add_argument("-q", "--quiet", action="store_true")
    ns = ap.parse_args(argv)
    settings = replace(
        d,
        seed=ns.seed,
        steps=ns.steps,
        batch=ns.batch,
        lr=ns.lr,
        rollouts=ns.rollouts,
        rollout_prefix_max=ns.prefix_max,
        rollout_prefix_min=min(d.rollout_prefix_min, ns.prefix_max),
        rollout_new_tokens=ns.new_tokens,
        max_files=ns.max_files,
        threads=ns.threads,
    )
    return ns, settings


def run(kind: HeadKind, defaults: HeadSettings, argv: Sequence[str] | None = None) -> int:
    """An entry's `main`: parse, train, write the head and its provenance, print where and how well."""
    ns, settings = _parse(kind, defaults, argv)
    logging.basicConfig(level=logging.WARNING if ns.quiet else logging.INFO, format="%(asctime)s %(message)s")
    started = datetime.now(timezone.utc)
    command = shlex.join([*shlex.split(kind.prog), *(sys.argv[1:] if argv is None else argv)])
    t0 = time.perf_counter()
    result = train_head(kind, settings, ns.target)
    head_dir = save_head(kind, result, ns.out / kind.folder)
    prov = write_provenance(kind, result, settings, ns.target, ns.out, command, started, time.perf_counter() - t0)
    print(f"head:       {head_dir} ({dir_size(head_dir) / 1e6:.2f} MB)")
    print(f"provenance: {prov}")
    print("held-out offline acceptance per position: " + " / ".join(f"{a:.1%}" for a in result.heldout_acceptance))
    return 0
