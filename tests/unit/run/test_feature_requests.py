"""Engine features are recorded as requested and read back as the engine resolved them (issue 31), as the graph
and compile modes are: run/cells.py puts a mode's features into the job's `requested`, the worker's
effective_config reads each back from the engine's config, so the judge can warn where the two differ."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mtpbench.config import ExperimentConfig
from mtpbench.engine.fingerprint import effective_config
from mtpbench.run.cells import engine_args_for
from mtpbench.schema import FEATURES_READ_BACK


def config(**modes: Any) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "name": "features",
            "model": "m",
            "speculative": {"method": "mtp", "model": "d", "num_speculative_tokens": 3},
            "prompts": "p.yaml",
            "modes": modes,
            "engine_args": {"max_model_len": 1024},
        }
    )


def test_a_modes_features_are_recorded_as_requested_and_only_those_it_sets() -> None:
    cfg = config(
        eager={"enforce_eager": True}, cached={"enforce_eager": True, "engine_args": {"enable_prefix_caching": True}}
    )
    args, requested = engine_args_for(cfg, "cached")
    assert args["enable_prefix_caching"] is True
    assert requested == {
        "cudagraph_mode": None,
        "compilation_mode": None,
        "enforce_eager": True,
        "enable_prefix_caching": True,
        "max_model_len": 1024,  # the config's own engine_args are requested too
    }
    _, plain = engine_args_for(cfg, "eager")
    assert "enable_prefix_caching" not in plain


def fake_llm(**over: Any) -> Any:
    sched = SimpleNamespace(
        enable_chunked_prefill=True, max_num_batched_tokens=2048, max_num_seqs=256, async_scheduling=False
    )
    model = SimpleNamespace(enforce_eager=True, dtype="torch.float32", max_model_len=1024)
    cfg = SimpleNamespace(
        compilation_config=SimpleNamespace(mode=None, cudagraph_mode=None),
        speculative_config=None,
        model_config=model,
        device_config=SimpleNamespace(device_type="cpu"),
        scheduler_config=sched,
        cache_config=SimpleNamespace(enable_prefix_caching=over.get("enable_prefix_caching", True)),
    )
    return SimpleNamespace(llm_engine=SimpleNamespace(vllm_config=cfg))


def test_the_engine_reads_every_feature_back_from_its_resolved_config() -> None:
    eff = effective_config(fake_llm(enable_prefix_caching=False))
    assert {k: eff[k] for k in FEATURES_READ_BACK} == {
        "enable_prefix_caching": False,
        "enable_chunked_prefill": True,
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 256,
        "async_scheduling": False,
        "max_model_len": 1024,
    }
