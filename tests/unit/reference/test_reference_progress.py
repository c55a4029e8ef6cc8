"""The replay's progress (issue 37 item 15): `mtpbench reference` sat at "0/?" while the first batch of prompts
was regenerated (minutes on a busy 2-core box); the replay now says it is loading the pair and regenerating
each batch, with the total, before any prompt is finished. On the stored tiny run (real pair, 5 prompts)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from mtpbench.reference import ReferenceOptions, ReplayProgress, ReplayStage, compute_reference
from mtpbench.store.results import load_run

ROOT = Path(__file__).resolve().parents[3]
STORED = ROOT / "tests" / "data" / "runs" / "tiny-stock-fault"


@pytest.mark.slow
def test_the_replay_says_what_it_does_with_the_total_before_its_first_prompt_is_done(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(STORED, run_dir)
    manifest = run_dir / "manifest.json"
    # The stored run was written in another checkout: its model and prompt paths point there.
    manifest.write_text(manifest.read_text().replace("/work/wt-report/", f"{ROOT}/"))
    heard: list[ReplayProgress] = []
    compute_reference(load_run(run_dir), ReferenceOptions(batch=2), heard.append)
    stages = [(p.stage, p.done, p.total, p.batch) for p in heard]
    assert stages[:2] == [(ReplayStage.LOADING, 0, 5, 0), (ReplayStage.REGENERATING, 0, 5, 2)]
    regenerating = [(done, batch) for stage, done, _, batch in stages if stage is ReplayStage.REGENERATING]
    assert regenerating == [(0, 2), (2, 2), (4, 1)]  # each batch announced before its prompts finish
    assert stages[-1] == (ReplayStage.REPLAYING, 5, 5, 0)
