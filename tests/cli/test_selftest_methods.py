"""The selftest per method (issue 38 item 6, cli/selftest_methods.py): one table names every shipped method's
config and planted fault, `--method` narrows the selftest to the methods it names (an unknown one is one line,
exit 2), and the quick proof passes only if stock counts what the weights say, the fault falls below the
reference and the text is unchanged. The engine's run of it is the session's selftest (tests/engine/)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import mtpbench.cli.selftest as st
from mtpbench.cli.selftest_methods import (
    DEFAULT_METHOD,
    METHODS,
    QUICK_PROMPTS,
    MethodCheck,
    evaluate_quick,
    quick_config,
    select_methods,
)
from mtpbench.config import config_prompts, load_config
from mtpbench.fixes.registry import REGISTRY
from mtpbench.judge.compare import judge
from mtpbench.judge.evidence import collect
from mtpbench.judge.signals.reference_comparison import hold
from mtpbench.patches.faults.drift_after_requests import AFTER_ENV
from mtpbench.store.reference_records import read_reference
from mtpbench.store.results import load_run
from tests.support.cli import invoke, one_error_line
from tests.support.reference_runs import GOOD, WORSE, per_prompt, write_reference

STOCK, FAULT = "cpu/eager/stock", "cpu/eager/fault"


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_names_its_shipped_config_an_eager_mode_and_a_registered_fault(name: str) -> None:
    check = METHODS[name]
    cfg = load_config(check.config_path)
    assert cfg.speculative.method == check.vllm_method
    assert any(spec.enforce_eager for spec in cfg.modes.values())
    assert check.fault in REGISTRY


def test_the_embedded_default_keeps_the_full_proof_and_runs_first() -> None:
    assert next(iter(METHODS)) == DEFAULT_METHOD and METHODS[DEFAULT_METHOD].full
    assert METHODS[DEFAULT_METHOD].config_path == st.DEFAULT_CONFIG
    assert [c.name for c in METHODS.values() if not c.full] == [
        "ngram",
        "suffix",
        "draft_model",
        "eagle",
        "eagle3",
        "deepseek_mtp",
    ]


def test_no_method_named_selects_every_method_in_the_table_order() -> None:
    assert select_methods(None) == list(METHODS.values())
    assert [c.name for c in select_methods(["ngram", "mtp"])] == ["mtp", "ngram"]


def test_quick_config_runs_stock_and_the_fault_once_in_eager_with_the_fault_switches() -> None:
    check = MethodCheck("ngram", "tiny-gemma4-ngram.yaml", "drift-after-requests", {AFTER_ENV: "0"})
    cfg = quick_config(check)
    assert cfg.variants == {"stock": [], "fault": ["drift-after-requests"]}
    assert list(cfg.modes) == ["eager"] and cfg.repeats == 1 and cfg.hash_seeds == [0]
    assert all(b.env[AFTER_ENV] == "0" for b in cfg.builds.values())
    assert cfg.name == "tiny-gemma4-ngram-selftest"
    # The handful of prompts is the config's filter, so the reference replays the very prompts the run ran.
    assert cfg.prompt_filter is not None and cfg.prompt_filter.limit == QUICK_PROMPTS
    assert cfg.prompt_filter.max_prompt_bytes == 800
    assert len(config_prompts(cfg).prompts) == QUICK_PROMPTS


@pytest.mark.parametrize("name", ["draft_model", "eagle3"])
def test_proposer_base_methods_plant_the_drift_fault_from_the_first_request(name: str) -> None:
    """The draft model's and EAGLE-3's proposers share vLLM's `SpecDecodeBaseProposer.propose`, which
    `drift-after-requests` wraps; with MTPBENCH_DRIFT_AFTER=0 its drafts go wrong in the quick run's first step,
    not after the 40 requests a handful of prompts never reaches."""
    cfg = quick_config(METHODS[name])
    assert cfg.variants == {"stock": [], "fault": ["drift-after-requests"]}
    assert [b.env[AFTER_ENV] for b in cfg.builds.values()] == ["0"]
    assert list(cfg.modes) == ["eager"] and cfg.repeats == 1
    assert len(config_prompts(cfg).prompts) == QUICK_PROMPTS
    # The quick run is the shipped config's own prompts and sampling, so it counts what its baseline counts.
    shipped = load_config(METHODS[name].config_path)
    assert (
        cfg.prompts == shipped.prompts and cfg.sampling == shipped.sampling and cfg.speculative == shipped.speculative
    )


def test_a_drift_fault_row_switches_it_on_within_the_quick_prompts() -> None:
    """A row planting `drift-after-requests` must set its switch below QUICK_PROMPTS: the default (40 requests)
    would leave the quick run's fault cell stock, and the selftest would fail for no fault of the engine's."""
    rows = [c for c in METHODS.values() if c.fault == "drift-after-requests"]
    assert rows
    assert all(int(c.fault_env[AFTER_ENV]) < QUICK_PROMPTS for c in rows)


def test_unknown_method_is_one_line_and_exit_2_before_any_run(tmp_path: Path) -> None:
    res = invoke("selftest", "--method", "medusa", "--out", tmp_path / "runs")
    assert res.exit_code == 2, res.output
    assert (
        one_error_line(res) == "mtpbench: error: --method medusa: no such method in the selftest; known: "
        "mtp, ngram, suffix, draft_model, eagle, eagle3, deepseek_mtp"
    )
    assert not (tmp_path / "runs").exists()


def test_method_does_not_combine_with_the_class_selftest(tmp_path: Path) -> None:
    res = invoke("selftest", "--class", "--method", "mtp", "--out", tmp_path / "runs")
    assert res.exit_code == 2, res.output
    assert "--method does not apply to --class" in one_error_line(res)


def _quick_run(make_run: Callable[..., Path], fault: tuple[int, list[int]], fault_text: str = "same") -> Path:
    run = make_run(
        {STOCK: [[0.0]], FAULT: [[0.0]]},
        per_prompt={STOCK: per_prompt(GOOD), FAULT: per_prompt(fault)},
        seeds=[0],
        baseline=None,
    )
    write_reference(run, [STOCK, FAULT], sha=fault_text)
    return run


def _evaluate(run: Path) -> tuple[bool, list[str]]:
    r = load_run(run)
    ref = read_reference(run)
    assert ref is not None
    return evaluate_quick("ngram", judge(r), hold(r.run_id, collect(r), ref, 3))


def test_method_narrows_the_selftest_to_the_methods_named(
    make_run: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _quick_run(make_run, WORSE)
    ok, lines = _evaluate(run)
    seen: list[list[str]] = []

    def fake(out: Path, make_view: object = None, methods: list[MethodCheck] | None = None) -> st.SelftestResult:
        seen.append([c.name for c in methods or []])
        return st.SelftestResult(judge(load_run(run)), ok, lines)

    monkeypatch.setattr(st, "run_selftest", fake)
    res = invoke("selftest", "--method", "ngram")
    assert res.exit_code == 0, res.output
    assert seen == [["ngram"]]
    assert "SELFTEST PASS: the gate catches every method's planted fault (ngram)" in res.stdout


def test_quick_proof_passes_when_stock_matches_the_weights_and_the_fault_is_below(
    make_run: Callable[..., Path],
) -> None:
    ok, lines = _evaluate(_quick_run(make_run, WORSE))
    assert ok, lines
    assert f"[ok] ngram: stock {STOCK}: 5 of 5 prompts count exactly what the weights say" in "\n".join(lines)
    assert f"[ok] ngram: fault {FAULT} below the reference with no baseline (5 of 5 prompts" in "\n".join(lines)
    assert "[ok] ngram: generated text identical with and without the fault (5 outputs)" in lines


def test_quick_proof_fails_when_the_fault_is_not_seen(make_run: Callable[..., Path]) -> None:
    ok, lines = _evaluate(_quick_run(make_run, GOOD))
    assert not ok
    assert f"[FAIL] ngram: fault {FAULT} below the reference with no baseline (0 of 5 prompts" in "\n".join(lines)


def test_quick_proof_needs_a_stock_and_a_fault_cell(make_run: Callable[..., Path]) -> None:
    run = make_run({STOCK: [[0.0]]}, per_prompt={STOCK: per_prompt(GOOD)}, seeds=[0], baseline=None)
    write_reference(run, [STOCK])
    ok, lines = _evaluate(run)
    assert not ok and "needs a stock and a fault cell" in lines[0]


def test_quick_config_keeps_the_configs_stock_corrections_in_both_variants() -> None:
    """The DeepSeek config's stock variant carries cpu-rotary-embedding (vLLM-CPU's rotary op misreads MLA's
    views): without it the stock engine's text is not the weights', so the quick proof keeps it in stock and
    plants the fault on top of it."""
    cfg = quick_config(METHODS["deepseek_mtp"])
    assert cfg.variants == {
        "stock": ["cpu-rotary-embedding"],
        "fault": ["cpu-rotary-embedding", "drift-after-requests"],
    }
    assert cfg.speculative.method == "mtp"


def test_a_method_this_install_cannot_run_is_one_line_before_any_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An install without mtpbench's suffix extra has no arctic-inference: the selftest says so in one line,
    exit 2, and how to prove the other methods, instead of failing suffix's engine after the others ran."""
    import mtpbench.run.envs.builds as builds

    monkeypatch.setitem(builds.METHOD_LIBRARIES, "suffix", ("mtpbench_no_such_module", "the suffix extra"))
    started: list[object] = []
    monkeypatch.setattr(st, "run_selftest", lambda *a, **k: started.append(a))
    res = invoke("selftest", "--method", "ngram", "--method", "suffix", "--out", tmp_path / "runs")
    assert res.exit_code == 2, res.output
    line = one_error_line(res)
    assert line.startswith("mtpbench: error: selftest suffix: method suffix needs mtpbench_no_such_module, which ")
    assert line.endswith(
        "lacks: install the suffix extra, or add it to the build's requirements; or prove the "
        "others alone (--method ngram)"
    )
    assert started == [] and not (tmp_path / "runs").exists()
