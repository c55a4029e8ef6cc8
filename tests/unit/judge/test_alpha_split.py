"""Issue 30 part 3: the run's false-alarm rate is split in two fixed parts, one for the primary checks (what
a pass certifies) and one for the diagnoses, so that diagnoses added to a run (graph modes, positions) no
longer thin the primary endpoint's level. Regression guard: the even split over every check gave the
primary AL check 1 % / 11 in the default two-cell run, as little as each position diagnosis."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mtpbench.judge.compare import judge
from mtpbench.judge.plan import PRIMARY_SHARE, count_family, split_alpha
from mtpbench.judge.save import baseline_of_run
from mtpbench.judge.stats import detectable_drop
from mtpbench.specs import GateSpec
from mtpbench.store.results import load_run

# Per prompt (drafts, accepted per position): five prompts that differ, so every check has a spread.
RUN = [(40, [39, 37, 35]), (38, [37, 36, 33]), (41, [40, 38, 34]), (36, [35, 33, 31]), (39, [38, 37, 36])]
BASE = [(40, [39, 38, 34]), (38, [37, 35, 34]), (41, [40, 37, 35]), (36, [35, 34, 30]), (39, [38, 36, 35])]


def test_the_primary_checks_keep_a_fixed_share_whatever_the_diagnoses() -> None:
    few, many = split_alpha(0.01, 2, 9), split_alpha(0.01, 2, 90)
    assert few.primary == many.primary == pytest.approx(0.01 * PRIMARY_SHARE / 2)
    assert many.diagnosis == pytest.approx(0.01 * (1 - PRIMARY_SHARE) / 90)
    # The whole still holds the run's rate (Bonferroni within each part).
    assert 2 * few.primary + 9 * few.diagnosis == pytest.approx(0.01)
    # A part with no checks leaves its share to the other.
    assert split_alpha(0.01, 0, 6).diagnosis == pytest.approx(0.01 / 6)
    assert split_alpha(0.01, 2, 0).primary == pytest.approx(0.01 / 2)


def test_count_family_of_the_default_run() -> None:
    # Two cells, k = 3: AL + 3 positions each against the baseline, 3 graph-vs-eager checks; 2 primary ALs.
    assert count_family(3, 2, 3, "acceptance_length") == (11, 2)
    assert count_family(3, 2, 3, "positions") == (11, 6)
    assert count_family(3, 2, 3, "acceptance_length", against=False) == (3, 0)


def test_the_al_check_is_decided_at_the_primary_share_and_positions_at_the_diagnoses(
    make_run: Callable[..., Path],
) -> None:
    cells = {"b/eager/stock": [[0, 0, 0]], "b/graph/stock": [[0, 0, 0]]}
    base_run = load_run(make_run(cells, per_prompt={c: [BASE] for c in cells}, baseline=None))
    run = load_run(make_run(cells, per_prompt={c: [RUN] for c in cells}, baseline=None))
    comp = judge(run, baseline_of_run(base_run, "base"), accept_unchecked=True)
    assert (comp.family, comp.primary) == (11, 2)
    gate = GateSpec()
    for length in comp.lengths:
        assert length.se is not None
        # Before issue 30 this was detectable_drop(se, df, 0.01 / 11, ...): a larger MDE.
        assert length.mde == pytest.approx(detectable_drop(length.se, 4, 0.01 * PRIMARY_SHARE / 2, gate.power))
    for check in comp.checks:
        assert check.se is not None
        assert check.mde == pytest.approx(detectable_drop(check.se, 4, 0.01 * (1 - PRIMARY_SHARE) / 9, gate.power))
