"""Train the tiny EAGLE-3 head on a frozen tiny Llama target, the way vLLM's eagle3 runs it, and write it as
an eagle3 draft vLLM loads (config.json, model.safetensors) with its provenance.json.

The head is mtpbench/reference/eagle.py's `Eagle3Head` (the reference replays the very module trained here):
one Llama layer over `fc` of the target's auxiliary states at the layers the config names, the target's
embeddings, its own `lm_head` over the full 260-id byte vocabulary, started from the target's. The rollouts,
the chained training-time test, the loop and the files are mtpbench/training/heads.py's, shared with EAGLE-1.

Entry: `python -m mtpbench.training.eagle3 --target mtpbench/fixtures/tiny_llama/target --out DIR`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# Before the first `import torch` (see train.py: spin-waiting OpenMP on a shared 2-core box).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from mtpbench.reference.eagle import DRAFTER_ARCHITECTURE, Eagle3Head, HeadShape
from mtpbench.training.heads import HeadKind, HeadSettings, head_shape, llama_head_config, run

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM


@dataclass
class Eagle3Settings(HeadSettings):
    """The shared head recipe and the target layers EAGLE-3 reads; recorded in the provenance."""

    # Low, middle and the last layer's output of a 4-layer target. vLLM's default (2, n // 2, n - 3) is the
    # set (1, 2) at n = 4: two states for an fc that reads three, so the config names its layers.
    aux_layer_ids: tuple[int, ...] = (1, 2, 4)


def build_head(target: LlamaForCausalLM, settings: HeadSettings) -> Eagle3Head:
    assert isinstance(settings, Eagle3Settings)
    head = Eagle3Head(head_shape(target.config.to_dict(), settings, settings.aux_layer_ids))
    with torch.no_grad():
        # Start from the target's output embedding: the head then begins by scoring as the target does.
        head.lm_head.weight.copy_(target.lm_head.weight)
    return head


def head_config(shape: HeadShape, target_config: dict[str, Any]) -> dict[str, Any]:
    """config.json in the form vLLM loads for an eagle3 draft (a one-layer Llama config, architecture
    LlamaForCausalLMEagle3, the auxiliary layers named)."""
    extra = {"draft_vocab_size": shape.vocab_size, "eagle_aux_hidden_state_layer_ids": list(shape.aux_layer_ids)}
    return llama_head_config(shape, target_config, DRAFTER_ARCHITECTURE, extra)


def _facts(settings: HeadSettings) -> dict[str, Any]:
    assert isinstance(settings, Eagle3Settings)
    return {"aux_layer_ids": list(settings.aux_layer_ids)}


KIND = HeadKind(
    method="eagle3",
    folder="eagle3",
    prog="python -m mtpbench.training.eagle3",
    architecture=DRAFTER_ARCHITECTURE,
    what="tiny EAGLE-3 head (LlamaForCausalLMEagle3, vLLM method eagle3) over the tiny Llama target",
    semantics="vLLM eagle3: fc(cat aux states) -> hidden; layer input cat(input_layernorm(embed), "
    "hidden_norm(hidden)); step j>1 at the next position reads the previous pre-norm output and the "
    "previous draft token, attending the teacher-forced KV at 0..s and its own chain's KV",
    build=build_head,
    config=head_config,
    facts=_facts,
)


def main(argv: Sequence[str] | None = None) -> int:
    return run(KIND, Eagle3Settings(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
