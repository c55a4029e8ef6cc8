"""The engine's counts held against the reference (mtpbench/judge/signals/reference_comparison.py) on constructed runs:
an engine that counts what the weights say passes, a planted below-reference engine is flagged naming its cell,
positions, repeats and prompts, and the warnings (above the reference, counters that do not add up with the
text, other text) each say what they saw."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mtpbench.errors import ExitCode
from mtpbench.judge.evidence import collect
from mtpbench.judge.findings import Kind, Severity
from mtpbench.judge.findings.reference import ReferenceBelow, ReferenceDisagreement, ReferenceTextDiffers
from mtpbench.judge.signals.reference_comparison import ReferenceComparison, hold
from mtpbench.store.reference_records import append_lines, read_reference
from mtpbench.store.results import load_run
from tests.support.reference_runs import CELL, GOOD, WORSE, per_prompt, write_reference
from tests.support.synthetic_runs import PROMPTS


def _hold(run: Path) -> ReferenceComparison:
    r = load_run(run)
    ref = read_reference(run)
    assert ref is not None
    return hold(r.run_id, collect(r), ref, 3)


def test_an_engine_that_counts_what_the_weights_say_passes(make_run: Callable[..., Path]) -> None:
    run = make_run({CELL: [[0.0]] * 2}, per_prompt={CELL: per_prompt(GOOD, GOOD)}, baseline=None)
    write_reference(run, [CELL])
    cmp = _hold(run)
    (a,) = cmp.cells
    assert (a.observations, a.same_text, a.exact) == (10, 10, 10)
    assert a.exact_share == 1.0
    assert a.largest is not None and a.largest.points == 0.0
    assert cmp.findings == []
    assert cmp.exit_code == ExitCode.OK


def test_a_planted_below_reference_engine_is_flagged(make_run: Callable[..., Path]) -> None:
    # Repeat 0 (hash seed 0) counts what the weights say, repeat 1 (seed 1) falls below at every position.
    run = make_run({CELL: [[0.0]] * 2}, per_prompt={CELL: per_prompt(GOOD, WORSE)}, baseline=None)
    write_reference(run, [CELL])
    cmp = _hold(run)
    (f,) = cmp.findings
    assert (f.kind, f.severity, f.cell) == (Kind.ENGINE_BELOW_REFERENCE, Severity.FAIL, CELL)
    assert isinstance(f.payload, ReferenceBelow)
    assert f.payload.positions == [0, 1, 2] and f.payload.al
    assert f.payload.hash_seeds == [1]  # only the seed that fell below, alone
    assert set(f.payload.prompts) == set(PROMPTS)
    assert cmp.exit_code == ExitCode.REGRESSION
    (a,) = cmp.cells
    assert a.exact == 5  # repeat 0's prompts
    assert a.largest is not None and a.largest.repeat == 1 and round(a.largest.points, 1) == -40.0
    pos2 = next(c for c in a.pooled() if c.position == 2)
    assert pos2.reference == 1.0 and round(pos2.engine or 0, 4) == round((32 * 5 + 24 * 5) / (32 * 5 + 40 * 5), 4)


def test_a_deviation_within_the_tolerance_is_reported_not_flagged(make_run: Callable[..., Path]) -> None:
    # One prompt of five drafts once more and accepts one fewer at pos1/pos2: 94 + 33 + 1 = 128 tokens.
    near = [GOOD] * 4 + [(33, [32, 31, 31])]
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: [near]}, baseline=None)
    write_reference(run, [CELL])
    cmp = _hold(run)
    assert cmp.findings == []
    (a,) = cmp.cells
    assert a.exact == 4
    assert a.fewer == [PROMPTS[4]]


def test_an_engine_above_the_reference_is_a_disagreement(make_run: Callable[..., Path]) -> None:
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(GOOD)}, baseline=None)
    write_reference(run, [CELL], counts=WORSE)
    cmp = _hold(run)
    (f,) = cmp.findings
    assert (f.kind, f.severity) == (Kind.REFERENCE_DISAGREEMENT, Severity.WARN)
    assert isinstance(f.payload, ReferenceDisagreement)
    assert f.payload.positions == [0, 1, 2] and f.payload.al
    assert cmp.exit_code == ExitCode.OK  # a warning: it points at the counters or the reference, not a drop


def test_counters_that_do_not_add_up_with_the_text_are_a_disagreement(make_run: Callable[..., Path]) -> None:
    # A drafter reported as drafting that never verified a draft on one prompt: 0 + 0 + 1 < 128 tokens.
    counts = [GOOD] * 4 + [(0, [0, 0, 0])]
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: [counts]}, baseline=None)
    write_reference(run, [CELL])
    cmp = _hold(run)
    kinds = {f.kind: f.payload for f in cmp.findings}
    n = kinds[Kind.REFERENCE_DISAGREEMENT]
    assert isinstance(n, ReferenceDisagreement)
    assert [u.prompt_id for u in n.unbalanced] == [PROMPTS[4]]
    assert n.unbalanced[0].generated == 128 and n.unbalanced[0].num_drafts == 0


def test_a_lookup_methods_undrafted_steps_are_no_accounting_disagreement(make_run: Callable[..., Path]) -> None:
    # Issue 38: n-gram lookup decodes a token with no draft wherever its lookup finds nothing, so
    # 60 accepted + 20 drafts + 1 < 128 tokens is a correct engine there (and a broken one for MTP).
    sparse = (20, [20, 20, 20])
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(sparse)}, baseline=None, method="ngram")
    write_reference(run, [CELL], counts=sparse, method="ngram")
    cmp = _hold(run)
    assert cmp.findings == []
    assert cmp.cells[0].exact == len(PROMPTS)
    mtp = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(sparse)}, baseline=None)
    write_reference(mtp, [CELL], counts=sparse, method="mtp")
    (f,) = _hold(mtp).findings
    assert isinstance(f.payload, ReferenceDisagreement) and len(f.payload.unbalanced) == len(PROMPTS)


def test_other_text_is_its_own_warning_and_leaves_the_exact_share(make_run: Callable[..., Path]) -> None:
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(GOOD)}, baseline=None, text={CELL: ["other"]})
    write_reference(run, [CELL])
    cmp = _hold(run)
    (f,) = cmp.findings
    assert f.kind == Kind.REFERENCE_TEXT_DIFFERS
    assert isinstance(f.payload, ReferenceTextDiffers)
    assert set(f.payload.prompts) == set(PROMPTS) and f.payload.observations == 5
    (a,) = cmp.cells
    assert a.same_text == 0 and a.exact_share is None
    assert cmp.exit_code == ExitCode.OK


def test_a_cell_the_reference_lacks_is_listed_not_held(make_run: Callable[..., Path]) -> None:
    other = "current/compiled/stock"
    run = make_run(
        {CELL: [[0.0]], other: [[0.0]]}, per_prompt={CELL: per_prompt(GOOD), other: per_prompt(GOOD)}, baseline=None
    )
    write_reference(run, [CELL])
    cmp = _hold(run)
    assert [a.cell for a in cmp.cells] == [CELL]
    assert cmp.not_held == [other]


def test_the_last_complete_session_is_read(tmp_path: Path) -> None:
    write_reference(tmp_path, [CELL], counts=WORSE, session="s1")
    write_reference(tmp_path, [CELL], session="s2")
    # a third session cut short (no reference_end) is never read
    append_lines(tmp_path, [{"schema": 1, "type": "reference_start", "session": "s9", "replayed": {}}])
    ref = read_reference(tmp_path)
    assert ref is not None
    assert ref.session == "s2"
    assert {p.num_drafts for p in ref.prompts} == {GOOD[0]}
