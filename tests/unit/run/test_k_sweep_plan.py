"""k as an axis (issue 38 item 4), the config and planning side: `speculative.num_speculative_tokens` may be a
list, each k is its own cell named `build/mode/variant@k<k>` whose job asks vLLM for that k, and a single int
plans exactly the cells it always did."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mtpbench.config import config_prompts, load_config
from mtpbench.errors import UserError
from mtpbench.run.cells import cell_jobs, config_variant, expand
from mtpbench.store.results import load_run
from tests.support.fake_runs import execute, fake_config

REPO = Path(__file__).resolve().parents[3]


def _write(tmp_path: Path, k: object, **changes: object) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "tiny-gemma4-mtp.yaml").read_text())
    cfg.update(changes)
    cfg["speculative"]["num_speculative_tokens"] = k
    cfg["model"] = str(REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp" / "target")
    cfg["prompts"] = str(REPO / "prompts" / "coding.yaml")
    cfg["baseline"] = None
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_a_list_of_k_is_a_sweep_and_an_int_is_not(tmp_path: Path) -> None:
    sweep = load_config(_write(tmp_path, [1, 3, 5])).speculative
    assert sweep.sweep and sweep.ks == [1, 3, 5]
    one = load_config(_write(tmp_path, 3)).speculative
    assert not one.sweep and one.ks == [3] and one.to_vllm()["num_speculative_tokens"] == 3


@pytest.mark.parametrize(
    ("k", "says"),
    [
        ([1, 1], "duplicate k in [1, 1]"),
        ([], "at least one k"),
        ([0, 3], "k must be in 1..16, got 0"),
        ([1, True], "expected an integer k"),
        (2.5, "expected an integer k"),
        (17, "k must be in 1..16, got 17"),
    ],
)
def test_a_bad_k_is_one_line_naming_the_key(tmp_path: Path, k: object, says: str) -> None:
    with pytest.raises(UserError) as err:
        load_config(_write(tmp_path, k))
    line = str(err.value)
    assert "\n" not in line and "speculative.num_speculative_tokens" in line and says in line


def test_a_sweep_runs_the_offline_workload_only(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="a k sweep runs the offline workload, not serving"):
        load_config(_write(tmp_path, [1, 3], workload={"kind": "serving", "concurrency": 2, "num_requests": 4}))


def test_a_sweep_plans_one_cell_per_k_each_asking_vllm_for_its_k(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, [1, 3], repeats=2, hash_seeds=[0, 1], modes={"eager": {"enforce_eager": True}}))
    cells = expand(cfg)
    assert [(c.cell_id, c.repeat) for c in cells] == [
        ("current/eager/stock@k1", 0),
        ("current/eager/stock@k1", 1),
        ("current/eager/stock@k3", 0),
        ("current/eager/stock@k3", 1),
    ]
    jobs = [p.job for p in cell_jobs(cfg, config_prompts(cfg), cells, "r", "/tmp/records.jsonl")]
    assert [j["speculative_config"]["num_speculative_tokens"] for j in jobs] == [1, 1, 3, 3]
    assert [j["variant"] for j in jobs] == ["stock@k1", "stock@k1", "stock@k3", "stock@k3"]
    # Distinct slugs (job files and logs), and the config's variant found again from the recorded one (resume).
    assert len({c.slug for c in cells}) == 4
    assert {config_variant(c.label, c.k) for c in cells} == {"stock"}


def test_a_single_k_plans_the_cells_it_always_did(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, 3, repeats=1, hash_seeds=[0]))
    cells = expand(cfg)
    assert [c.cell_id for c in cells] == ["current/eager/stock", "current/compiled/stock"]
    assert all(c.k is None for c in cells)
    jobs = [p.job for p in cell_jobs(cfg, config_prompts(cfg), cells, "r", "/tmp/records.jsonl")]
    assert {j["speculative_config"]["num_speculative_tokens"] for j in jobs} == {3}


def test_the_shipped_k_sweep_config_loads() -> None:
    cfg = load_config(REPO / "configs" / "tiny-gemma4-mtp-k-sweep.yaml")
    assert cfg.speculative.ks == [1, 3, 5] and cfg.reference_replay
    assert [c.cell_id for c in expand(cfg) if c.repeat == 0] == [
        "current/eager/stock@k1",
        "current/eager/stock@k3",
        "current/eager/stock@k5",
    ]


def test_a_sweep_run_records_each_cell_at_its_k_and_resumes_it(tmp_path: Path) -> None:
    # The runner with tests/fake_worker.py: the manifest's cells say their k, each record has that many
    # positions, and a resume re-plans the failed k cells as the same cells (its config variant found again).
    from typer.testing import CliRunner

    from mtpbench.cli import app

    gate = tmp_path / "fixed"
    spec = {"method": "mtp", "num_speculative_tokens": [1, 2]}
    config = fake_config(tmp_path, {"good": {}, "flaky": {"fail_unless": str(gate)}}, prompts=2, speculative=spec)
    first = execute(config, tmp_path / "runs")
    assert first.exit_code == 3 and sorted(first.failed) == ["flaky/eager/stock@k1 r0", "flaky/eager/stock@k2 r0"]
    gate.touch()
    res = CliRunner().invoke(app, ["run", "--resume", str(first.path), "--no-compare"], env={"MTPBENCH_WIDTH": "200"})
    assert res.exit_code == 0, res.output
    run = load_run(first.path)
    assert {(c.cell, c.k, c.attempt) for c in run.typed.cells} == {
        ("good/eager/stock@k1", 1, 1),
        ("good/eager/stock@k2", 2, 1),
        ("flaky/eager/stock@k1", 1, 2),
        ("flaky/eager/stock@k2", 2, 2),
    }
    widths = {(r["cell"], len(r["accepted_per_pos"])) for r in run.records if r["type"] == "prompt"}
    assert widths == {(c.cell, c.k) for c in run.typed.cells}
