"""Train the tiny EAGLE-1 head on a frozen tiny Llama target, the way vLLM's `eagle` method runs it, and write it
as a draft vLLM loads (config.json naming a one-layer Llama, model.safetensors) with its provenance.json.

The head is mtpbench/reference/eagle.py's `Eagle1Head` (the reference replays the very module trained here):
`fc` over [the target's embedding of the next token, the target's final-normed hidden state], one Llama layer
with no input norm, and the target's own `lm_head` over its output (no final norm): vLLM shares the target's
embeddings and lm_head, so the checkpoint holds `fc.*` and `layers.0.*` only. The rollouts, the chained
training-time test, the loop and the files are mtpbench/training/heads.py's, shared with EAGLE-3.

Entry: `python -m mtpbench.training.eagle1 --target mtpbench/fixtures/tiny_llama/target --out DIR` (writes
DIR/eagle/, the folder named after vLLM's method).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

# Before the first `import torch` (see train.py: spin-waiting OpenMP on a shared 2-core box).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from mtpbench.reference.eagle import EAGLE1_ARCHITECTURE, Eagle1Head, HeadShape
from mtpbench.training.heads import HeadKind, HeadSettings, head_shape, llama_head_config, run

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM


def build_head(target: LlamaForCausalLM, settings: HeadSettings) -> Eagle1Head:
    """A fresh head scoring with the frozen target's lm_head (its parameters are not the head's)."""
    return Eagle1Head(head_shape(target.config.to_dict(), settings), target.lm_head)


def head_config(shape: HeadShape, target_config: dict[str, Any]) -> dict[str, Any]:
    """config.json in the form vLLM loads for an eagle draft: a one-layer Llama config (vLLM's EAGLEConfig
    names it EagleLlamaForCausalLM)."""
    return llama_head_config(shape, target_config, EAGLE1_ARCHITECTURE, {})


KIND = HeadKind(
    method="eagle",
    folder="eagle",
    prog="python -m mtpbench.training.eagle1",
    architecture=f"Eagle{EAGLE1_ARCHITECTURE}",
    what="tiny EAGLE-1 head (one Llama layer, vLLM method eagle: EagleLlamaForCausalLM) over the tiny Llama target",
    semantics="vLLM eagle: x = fc(cat(target embed(token), hidden)); one Llama layer with no input norm over x "
    "(residual x); output = layer output + residual, no final norm; logits = the target's lm_head(output); "
    "hidden = the target's final-normed state at s for step 1, the previous step's output for step j>1 at "
    "the next position with the previous draft token, attending the teacher-forced KV at 0..s and its own "
    "chain's KV",
    build=build_head,
    config=head_config,
)


def main(argv: Sequence[str] | None = None) -> int:
    return run(KIND, HeadSettings(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
