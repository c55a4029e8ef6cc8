"""The method's own settings (`speculative.extra`, e.g. an n-gram lookup's prompt_lookup_min/max) are part of
what a baseline was measured with: a run with other settings is not comparable (exit 4), and a baseline saved
before the fingerprint held them still loads and judges what it can vouch for (migrate on read)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from mtpbench.errors import NotComparableError
from mtpbench.judge.compare import judge
from mtpbench.judge.save import baseline_of_run
from mtpbench.store.baseline import load_baseline, write_baseline
from mtpbench.store.results import load_run

CELL = "cpu/eager/stock"
GOOD = [80.0, 70.0, 60.0]
LOOKUP = {"prompt_lookup_min": 2, "prompt_lookup_max": 5}
SHIPPED_NGRAM = Path(__file__).resolve().parents[3] / "baselines" / "tiny-gemma4-ngram-cpu.yaml"


def ngram_run(make_run: Callable[..., Path], extra: dict[str, int]) -> Path:
    return make_run({CELL: [GOOD]}, method="ngram", extra=extra, baseline=None)


def save_baseline(run_path: Path, out: Path) -> Path:
    """`mtpbench baseline save`'s baseline of the run, standing for another run (every synthetic run has one id)."""
    base = baseline_of_run(load_run(run_path), "b")
    base.provenance.run_id = "20261201T000000Z-baseline-run"
    write_baseline(base, out, force=True)
    return out


def without_extra(path: Path) -> Path:
    """The baseline as a mtpbench from before the field wrote it: no fingerprint.speculative_extra."""
    data = yaml.safe_load(path.read_text())
    del data["fingerprint"]["speculative_extra"]
    old = path.with_name("old.yaml")
    old.write_text(yaml.safe_dump(data, sort_keys=False))
    return old


def test_a_saved_baseline_records_the_runs_lookup_bounds(make_run: Callable[..., Path], tmp_path: Path) -> None:
    base = load_baseline(save_baseline(ngram_run(make_run, LOOKUP), tmp_path / "b.yaml"))
    assert base.fingerprint.speculative_extra == LOOKUP


def test_a_baseline_measured_with_other_lookup_bounds_is_not_comparable(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    other = {"prompt_lookup_min": 3, "prompt_lookup_max": 5}
    base = load_baseline(save_baseline(ngram_run(make_run, other), tmp_path / "b.yaml"))
    with pytest.raises(NotComparableError) as caught:
        judge(load_run(ngram_run(make_run, LOOKUP)), base, accept_unchecked=True)
    assert caught.value.reasons == ["speculative.extra.prompt_lookup_min=2 vs baseline 3"]
    # A setting one side leaves to vLLM's default is a difference too: the default moves between releases.
    with pytest.raises(NotComparableError, match=r"speculative\.extra\.prompt_lookup_max=None vs baseline 5"):
        judge(load_run(ngram_run(make_run, {"prompt_lookup_min": 3})), base, accept_unchecked=True)


def test_a_baseline_with_the_same_lookup_bounds_judges_the_run(make_run: Callable[..., Path], tmp_path: Path) -> None:
    base = load_baseline(save_baseline(ngram_run(make_run, LOOKUP), tmp_path / "b.yaml"))
    comp = judge(load_run(ngram_run(make_run, dict(reversed(LOOKUP.items())))), base)
    assert comp.exit_code == 0 and "speculative.extra" not in comp.unchecked


def test_a_baseline_from_before_the_field_still_judges_a_run_without_settings(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    old = without_extra(save_baseline(make_run({CELL: [GOOD]}, baseline=None), tmp_path / "b.yaml"))
    base = load_baseline(old)
    assert base.fingerprint.speculative_extra is None
    comp = judge(load_run(make_run({CELL: [GOOD]}, baseline=None)), base)
    assert comp.exit_code == 0 and comp.unchecked == []


def test_a_baseline_from_before_the_field_cannot_vouch_for_a_runs_lookup(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    base = load_baseline(without_extra(save_baseline(ngram_run(make_run, LOOKUP), tmp_path / "b.yaml")))
    run = load_run(ngram_run(make_run, LOOKUP))
    with pytest.raises(NotComparableError, match=r"cannot check speculative\.extra"):
        judge(run, base)
    comp = judge(run, base, accept_unchecked=True)
    assert comp.unchecked == ["speculative.extra"] and comp.exit_code == 0


def test_the_shipped_ngram_baseline_holds_the_lookup_its_config_runs() -> None:
    shipped = load_baseline(SHIPPED_NGRAM).fingerprint
    config = yaml.safe_load((SHIPPED_NGRAM.parents[1] / "configs" / "tiny-gemma4-ngram.yaml").read_text())
    assert shipped.speculative_extra == config["speculative"]["extra"] == LOOKUP
