"""`mtpbench bisect` on a config that names a `reference_build` (issue 28, part 3): bisect runs one build per
run, so each run's config drops the reference build (the good build plays that role), and a second bisect
reuses every run the first one made instead of measuring again. Fake builds (tests/support/fake_runs.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import invoke
from tests.support.fake_runs import fake_config


def test_bisect_reuses_its_runs_when_the_config_names_a_reference_build(tmp_path: Path) -> None:
    cfg = fake_config(tmp_path, {"a": {}, "b": {}, "c": {}}, reference_build="c", baseline=None)
    first = invoke("bisect", cfg, "--out", tmp_path / "runs")
    # The fake builds count alike: c is not worse than a, so the search stops after measuring both ends.
    assert first.exit_code == 4 and "bisect: measuring a" in first.output and "bisect: measuring c" in first.output
    again = invoke("bisect", cfg, "--out", tmp_path / "runs")
    assert again.exit_code == 4 and "bisect: measuring" not in again.output, again.output
    assert len(list((tmp_path / "runs").iterdir())) == 2
