"""Train the tiny Llama target and distil its draft model (vLLM's `draft_model` method), seeded, CPU-only.

Same corpus, byte tokenizer and target recipe as the Gemma4 pair (train.py); the shapes, the drafter's
distillation and the held-out check live in llama.py. Output: target/ and draft/ (bf16 safetensors, config,
tokenizer) and provenance.json under --out.

Entry: `python -m mtpbench.training.train_llama --out DIR [--target SAVED_TARGET_DIR] [--target-only] ...`.
`--target-only` stops after the target; `--target` reuses a saved one and trains only the drafter, which has
its own seeds, so it is the drafter a full run would train.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# Must precede the first `import torch` of the process (see train.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from mtpbench.reference import sliding_llama
from mtpbench.training.export import dir_size, earlier_target_record, run_facts
from mtpbench.training.llama import LlamaResult, LlamaSettings, llama_config, train_llama_pair
from mtpbench.training.tokenizer import save_tokenizer

TOKENIZER = "byte-level: ids 0-255 = bytes, 256 <pad>, 257 <bos>, 258 <eos>, 259 <unk>; <bos> prepended"


def _parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, LlamaSettings]:
    d = LlamaSettings()
    ap = argparse.ArgumentParser(prog="python -m mtpbench.training.train_llama", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output dir (gets target/, draft/, provenance.json)")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--target-steps", type=int, default=d.target_steps)
    ap.add_argument("--seq-len", type=int, default=d.seq_len, help="the target's crop length in tokens (bytes + <bos>)")
    ap.add_argument("--target-batch", type=int, default=d.target_batch)
    ap.add_argument("--draft-steps", type=int, default=d.draft_steps)
    ap.add_argument("--rollouts", type=int, default=d.rollouts, help="greedy target rollouts for the drafter")
    ap.add_argument("--max-files", type=int, default=None, help="use only the first N corpus files (tests)")
    ap.add_argument("--threads", type=int, default=d.threads, help="torch intra-op threads for training")
    ap.add_argument("--target", type=Path, default=None, help="reuse this saved target/ folder, train the drafter")
    ap.add_argument("--target-only", action="store_true", help="train and save the target only")
    ap.add_argument("-q", "--quiet", action="store_true")
    ns = ap.parse_args(argv)
    settings = LlamaSettings(
        seed=ns.seed,
        target_steps=ns.target_steps,
        seq_len=ns.seq_len,
        target_batch=ns.target_batch,
        draft_steps=ns.draft_steps,
        rollouts=ns.rollouts,
        max_files=ns.max_files,
        threads=ns.threads,
    )
    return ns, settings


def _save(model: torch.nn.Module, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(str(path))
    model.to(torch.float32)
    save_tokenizer(path)


def _provenance(
    result: LlamaResult,
    settings: LlamaSettings,
    out: Path,
    command: str,
    started: datetime,
    total_s: float,
    reused: tuple[Path, dict[str, Any] | None] | None,
) -> dict[str, Any]:
    target: dict[str, Any] = {
        "architecture": "LlamaForCausalLM",
        "params": sum(p.numel() for p in result.target.parameters()),
        "loss_unit": "nats/byte (next-byte cross-entropy)",
    }
    if reused is None:
        target.update(result.target_log.summary())
    else:
        target.update(reused_from=str(reused[0]), trained_by=reused[1])
    prov: dict[str, Any] = {
        "what": "tiny LlamaForCausalLM target + a smaller LlamaForCausalLM draft model (vLLM draft_model)",
        "command": command,
        "date": started.isoformat(timespec="seconds"),
        "seed": settings.seed,
        "settings": asdict(settings),
        "corpus": result.corpus,
        "tokenizer": TOKENIZER,
        "target": target,
    }
    if result.drafter is not None:
        prov["drafter"] = {
            "architecture": "LlamaForCausalLM",
            "params": sum(p.numel() for p in result.drafter.parameters()),
            "loss_unit": "KL(target || drafter) + hard_weight * CE on the target's argmax, nats/token, "
            "teacher-forced on the target's greedy rollouts",
            **result.draft_log.summary(),
        }
        prov["rollouts_wall_s"] = round(result.rollout_wall_s, 1)
        prov["offline_heldout_acceptance_per_pos"] = [round(a, 4) for a in result.offline_acceptance]
    prov.update(run_facts(total_s, {p.name: dir_size(p) for p in (out / "target", out / "draft") if p.is_dir()}))
    return prov


def _training_record(target_dir: Path) -> dict[str, Any] | None:
    """The record of the run that trained `target_dir`: when the provenance beside it comes from a drafter-only
    run, the target's record it carries (so a second drafter-only run names the run that trained the target)."""
    record = earlier_target_record(target_dir)
    if record is not None and isinstance(record.get("trained_by"), dict):
        return record["trained_by"]
    return record


def main(argv: Sequence[str] | None = None) -> int:
    ns, settings = _parse(argv)
    logging.basicConfig(level=logging.WARNING if ns.quiet else logging.INFO, format="%(asctime)s %(message)s")
    started = datetime.now(timezone.utc)
    command = shlex.join(["python", "-m", "mtpbench.training.train_llama", *(sys.argv[1:] if argv is None else argv)])
    # Read before anything is written: --target may be the very folder --out is about to overwrite.
    reused = (ns.target, _training_record(ns.target)) if ns.target is not None else None
    t0 = time.perf_counter()
    result = train_llama_pair(settings, ns.target, with_drafter=not ns.target_only)
    out: Path = ns.out
    # A sliding target trains as its transformers twin; it is written as the Llama config vLLM reads.
    _save(sliding_llama.as_llama(result.target, llama_config(settings.target_shape)), out / "target")
    if result.drafter is not None:
        _save(sliding_llama.as_llama(result.drafter, llama_config(settings.drafter_shape)), out / "draft")
    prov = _provenance(result, settings, out, command, started, time.perf_counter() - t0, reused)
    (out / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n")
    for name, size in prov["sizes_bytes"].items():
        print(f"{name}: {out / name} ({size / 1e6:.2f} MB)")
    if result.offline_acceptance:
        print("held-out offline acceptance per position: " + " / ".join(f"{a:.1%}" for a in result.offline_acceptance))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
