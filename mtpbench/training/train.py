"""Train the tiny Gemma4 target and distil its gemma4_assistant MTP drafter, the way vLLM will run them.

Two phases, both seeded and CPU-only. (1) The target (`Gemma4ForCausalLM`) learns next-byte prediction on
random crops of the standard library's `.py` files. (2) Its weights are rounded to bf16 (the shipped
precision) and frozen; the drafter (`Gemma4AssistantForCausalLM`) is distilled from it over `k` chained draft
steps with exactly vLLM's Gemma4 MTP semantics (vllm/v1/spec_decode/gemma4.py, models/gemma4_mtp.py): every
draft step queries from the last verified position p; step 1 feeds the token at p+1, embedded with the
*target's* embedding times sqrt(target hidden), next to the target's final-normed hidden state at p; the
drafter's layers compute queries only and attend, causally (sliding layers within the window), to the K/V of
the last target layer of their type; step j > 1 feeds the token at p+j and the previous step's output through
`post_projection`. Step j is trained towards the target's distribution at p+j (KL, plus cross-entropy on its argmax).
transformers' own assisted generation uses other positions and bidirectional masks, so training calls the
assistant's pieces directly. By default the drafter trains only on the target's own greedy continuations of
short corpus prefixes: the text a greedy benchmark drafts on.

Entry: `python -m mtpbench.training.train --out DIR [--seed N] [--target SAVED_TARGET_DIR] [--draft-steps N] ...`.
This module is that command line; the settings and shared training pieces live in recipe.py, the draft
semantics in drafting.py, the two phases in phases.py, and writing the pair and its provenance in export.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

# Must precede the first `import torch` of the process (libgomp reads it once, at load). On a shared 2-core box,
# OpenMP's default spin-waiting made every op wait for a descheduled second thread: a drafter step took 11-18 s
# instead of 2.4 s while another process was busy.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from mtpbench.training.export import dir_size, earlier_target_record, save_pair, write_provenance
from mtpbench.training.phases import train_pair
from mtpbench.training.recipe import TrainSettings


def _parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, TrainSettings]:
    d = TrainSettings()
    ap = argparse.ArgumentParser(prog="python -m mtpbench.training.train", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output dir (gets target/, assistant/, provenance.json)")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--target-steps", type=int, default=d.target_steps)
    ap.add_argument("--target-batch", type=int, default=d.target_batch)
    ap.add_argument("--target-lr", type=float, default=d.target_lr)
    ap.add_argument("--draft-steps", type=int, default=d.draft_steps)
    ap.add_argument("--draft-batch", type=int, default=d.draft_batch)
    ap.add_argument("--draft-lr", type=float, default=d.draft_lr)
    ap.add_argument("--rollouts", type=int, default=d.rollouts, help="greedy target rollouts for the drafter")
    ap.add_argument("--draft-rollout-fraction", type=float, default=d.draft_rollout_fraction)
    ap.add_argument("--draft-hard-weight", type=float, default=d.draft_hard_weight)
    ap.add_argument("--seq-len", type=int, default=d.seq_len)
    ap.add_argument("--max-files", type=int, default=None, help="use only the first N corpus files (tests)")
    ap.add_argument("--threads", type=int, default=d.threads, help="torch intra-op threads for training")
    ap.add_argument(
        "--target",
        type=Path,
        default=None,
        help="reuse this saved target/ folder and train only the drafter (the drafter a full run would train)",
    )
    ap.add_argument("-q", "--quiet", action="store_true")
    ns = ap.parse_args(argv)
    settings = TrainSettings(
        seed=ns.seed,
        seq_len=ns.seq_len,
        target_steps=ns.target_steps,
        target_batch=ns.target_batch,
        target_lr=ns.target_lr,
        draft_steps=ns.draft_steps,
        draft_batch=ns.draft_batch,
        draft_lr=ns.draft_lr,
        rollouts=ns.rollouts,
        draft_rollout_fraction=ns.draft_rollout_fraction,
        draft_hard_weight=ns.draft_hard_weight,
        rollout_prefix_max=min(d.rollout_prefix_max, ns.seq_len // 2),
        rollout_prefix_min=min(d.rollout_prefix_min, ns.seq_len // 4),
        max_files=ns.max_files,
        threads=ns.threads,
    )
    return ns, settings


def main(argv: Sequence[str] | None = None) -> int:
    ns, settings = _parse(argv)
    logging.basicConfig(level=logging.WARNING if ns.quiet else logging.INFO, format="%(asctime)s %(message)s")
    started = datetime.now(timezone.utc)
    command = shlex.join(["python", "-m", "mtpbench.training.train", *(sys.argv[1:] if argv is None else argv)])
    # Read before anything is written: --target may be the very folder --out is about to overwrite.
    reused = (ns.target, earlier_target_record(ns.target)) if ns.target is not None else None
    t0 = time.perf_counter()
    result = train_pair(settings, ns.target)
    out: Path = ns.out
    target_dir, assistant_dir = save_pair(result, out)
    prov = write_provenance(result, settings, out, command, started, time.perf_counter() - t0, reused)
    print(f"target:     {target_dir} ({dir_size(target_dir) / 1e6:.2f} MB)")
    print(f"assistant:  {assistant_dir} ({dir_size(assistant_dir) / 1e6:.2f} MB)")
    print(f"provenance: {prov}")
    for name, rates in result.offline_acceptance.items():
        print(f"held-out offline acceptance per position, {name}: " + " / ".join(f"{a:.1%}" for a in rates))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
