"""The engine tests' one harness, as vLLM's tests share `VllmRunner` (vllm/tests/conftest.py): `engine_runs`, a
session-wide factory that makes an `mtpbench run` on the real vLLM-CPU engine once and hands that same run to
every test that asks for it (tests/support/engine_runs.py); `selftest_run`, the one `mtpbench selftest` of the
session; and `soak_selftest`, the soak run that selftest makes (the very run `run_soak_selftest` makes on its
own), judged as that function judges it.

A run is keyed by its config's whole text and its command line, so two tests share a run only when they would
have made exactly the same one; each test still asserts its own exit code and records.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mtpbench.cli.selftest import SelftestResult, evaluate_soak
from mtpbench.judge.compare import judge
from mtpbench.schema import RunStatus
from mtpbench.store.results import load_run
from tests.support.engine_runs import EngineRuns, Selftest, mtpbench, run_folders


@pytest.fixture(scope="session")
def engine_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineRuns]:
    yield EngineRuns(tmp_path_factory.mktemp("engine-runs"))


@pytest.fixture(scope="session")
def selftest_run(tmp_path_factory: pytest.TempPathFactory) -> Selftest:
    out = tmp_path_factory.mktemp("selftest")
    res = mtpbench("selftest", "--out", out)
    # The selftest makes the embedded default's two runs, the flattening check and its short soak
    # (cli/selftest.py), and one quick run per other method (cli/selftest_methods.py).
    runs = run_folders(out)
    (run,) = [p for p in runs if p.name.endswith("-tiny-gemma4-mtp-selftest")]
    soak = [p for p in runs if p.name.endswith("-soak-selftest")]
    assert len(soak) == 1, res.stdout[-2000:]
    return Selftest(res, run, soak[0])


@pytest.fixture(scope="session")
def soak_selftest(selftest_run: Selftest) -> SelftestResult:
    """The soak part of the selftest judged as `run_soak_selftest` judges the run it makes: `mtpbench selftest`
    made this run with that function (the shipped config, its SOAK_PROMPTS prompts), so it is the same run."""
    run = load_run(selftest_run.soak)
    comp = judge(run)
    passed, lines = evaluate_soak(comp)
    lines.insert(0, f"soak selftest run: {selftest_run.soak}")
    # run_soak_selftest's `not outcome.failed`: the runner finishes a run "complete" only when no cell failed.
    return SelftestResult(comp, passed and run.manifest["status"] == RunStatus.COMPLETE, lines)
