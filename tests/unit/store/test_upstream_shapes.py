"""store/upstream_shapes.py: every shape `calibrate --emit` writes reads back as the golden and rule it was
written with, and the shapes as upstream commits them (copied in small here) import as baselines."""

from __future__ import annotations

import numpy as np
import pytest

from mtpbench.errors import UserError
from mtpbench.judge.calibrate import RULES, Calibration, calibrate
from mtpbench.judge.noise import Truth
from mtpbench.render.calibration import emit
from mtpbench.store.upstream_shapes import SHAPES, baseline_of_shape, read_shape

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def truth() -> Truth:
    rates = np.tile([0.95, 0.85, 0.7], (15, 1)) * np.linspace(0.97, 1.0, 15)[:, None]
    return Truth("t", tuple(f"p{i}" for i in range(15)), rates, np.full(15, 256.0))


def calibrated(rule: str) -> Calibration:
    return calibrate(RULES[rule], truth(), "t", None, reps=40, seed=3)


@pytest.mark.parametrize("shape", SHAPES)
def test_an_emitted_entry_imports_back_to_its_golden_and_threshold(shape: str) -> None:
    c = calibrated(shape if shape != "inferencex" else "trtllm-min-al")
    text = emit(c, shape, "Test::t")
    assert "false-alarm rate" in text and "power" in text  # the comment says what it was set for
    key = "Test::t" if shape != "inferencex" else None
    b = baseline_of_shape(shape, text, "x", COMMIT, "2026-12-06", key=key, k=3)
    up = b.upstream
    assert up is not None
    tol = c.calibrated.tolerance
    al = float(c.golden.al[0])
    if shape == "vllm-ascend-golden":
        assert up.per_pos == pytest.approx(list(c.golden.per_pos[0]), abs=1e-4)
        assert up.rule.pos_margin == pytest.approx(tol, abs=1e-4)
    elif shape == "vllm-acceptance-length":
        assert up.al == pytest.approx(al, abs=1e-4)
        assert up.rule.al_rtol == pytest.approx(tol, abs=1e-4) and up.rule.pos_rtol == pytest.approx(tol, abs=1e-4)
    elif shape == "inferencex":
        assert up.al == pytest.approx(al, abs=1e-4) and b.fingerprint.num_speculative_tokens == 3
    else:
        # the floor the file enforces is the calibrated one, however the file spells it
        assert up.al is not None and up.rule.al_floor is not None
        assert up.al * up.rule.al_floor == pytest.approx(al * (1 - tol), abs=1e-3)


def test_trtllms_reference_yaml_imports_the_entry_named() -> None:
    text = (
        "TestQwen3_4B::test_eagle3:\n  ref_al: 2.02809899228679\n  min_al: 1.9266940426724504\n"
        "T::u:\n  ref_al: 2.0\n  min_al: 1.9\n"
    )
    definition, al, per_pos, rule, name, _ = read_shape("trtllm-min-al", text, key="TestQwen3_4B::test_eagle3")
    assert (definition, name, per_pos) == ("pooled", "TestQwen3_4B::test_eagle3", None)
    assert al == pytest.approx(2.028099) and rule.al_floor == pytest.approx(0.95, abs=1e-6)
    with pytest.raises(UserError, match="2 entries; name one with --key"):
        read_shape("trtllm-min-al", text)


def test_vllms_dataclass_entry_imports_its_goldens_and_rtol() -> None:
    text = (
        'Eagle3ModelConfig(\n    verifier="Qwen/Qwen3-VL-30B-A3B-Instruct-FP8",\n'
        "    expected_acceptance_length=1.35,\n"
        "    expected_acceptance_lengths_per_pos=[0.2900, 0.0620, 0.0115],\n    rtol=0.15,\n)\n"
    )
    definition, al, per_pos, rule, _, _ = read_shape("vllm-acceptance-length", text)
    assert (definition, al, per_pos) == ("pooled", 1.35, [0.29, 0.062, 0.0115])
    assert (rule.al_rtol, rule.pos_rtol) == (0.05, 0.15)  # the AL check always reads DEFAULT_RTOL


def test_inferencex_curves_import_the_longest_draft_length_with_mtpbenchs_floor() -> None:
    text = "fixture-model:\n  thinking_on: {3: '2.5', 1: 1.4}\n  thinking_off: {1: 1.5}\n"
    b = baseline_of_shape("inferencex", text, "x", COMMIT, "2026-12-06")
    assert b.upstream is not None and b.upstream.al == 2.5 and b.fingerprint.num_speculative_tokens == 3
    assert b.upstream.rule.al_floor == pytest.approx(0.95)
    assert "sets no threshold" in (b.upstream.source.notes or "")


def test_sglangs_threshold_and_ascends_margin_import() -> None:
    _, al, _, rule, _, _ = read_shape("sglang-threshold", "    gsm8k_accept_length_thres = 4.6\n")
    assert al == 4.6 and rule.al_floor == 1.0
    text = "golden = [0.94, 0.90, 0.84]\n...\nassert a >= b or b - a < 0.06\n"
    _, _, per_pos, rule, _, _ = read_shape("vllm-ascend-golden", text)
    assert per_pos == [0.94, 0.9, 0.84] and rule.pos_margin == 0.06


def test_a_shape_without_its_numbers_is_one_clear_error() -> None:
    with pytest.raises(UserError, match="no expected_acceptance_length"):
        read_shape("vllm-acceptance-length", "nothing here")
    with pytest.raises(UserError, match="needs --k"):
        baseline_of_shape("sglang-threshold", "accept_length_thres = 2.0", "x", COMMIT, "2026-12-06")


def test_a_trtllm_entry_with_nan_or_negative_numbers_is_one_line_not_a_crash() -> None:
    # Found by feeding hostile files after the merge: `ref_al: .nan` / `min_al: -1` made UpstreamRule refuse
    # al_floor=nan, which escaped as an internal error (exit 3) instead of bad input (exit 2).
    from mtpbench.errors import UserError
    from mtpbench.store.upstream_shapes import baseline_of_shape

    with pytest.raises(UserError, match="trtllm-min-al: the file's numbers make no rule"):
        baseline_of_shape("trtllm-min-al", "x:\n  ref_al: .nan\n  min_al: -1\n", "b", "abc", "2026-12-06")
