"""Tests for the `ascend-gemma4-layer-params` fix: its per-layer param source, the API-shape detection and
installer (against small fake modules mimicking each vllm-ascend shape found upstream), the plugin entry
point's inertness, and — where vllm_ascend imports (it needs torch_npu) — the real module.

Which upstream each fake mirrors is said on the fake. The proposer/graph-wrapper fakes here follow the
shape vllm-ascend's *unit tests* describe (a `_maybe_update_metadata(attn_backend, multi_steps)` hook
calling `_runnable.update_draft_model_metadata(...)` and `_runnable.set_attn_backend(...)`), which no
readable vllm-ascend implementation contains; the shape of the one implementation read with UpdatableGraph
(vllm-project/vllm-ascend 6f1ce9b8) is faked and tested in tests/unit/fixes/test_fixes_ascend_6f1ce9b8.py.

Regression guarded: vllm-ascend graph mode flattened each Gemma4 MTP draft step's per-layer attention
metadata to one representative layer, so draft layers of both KV-cache groups read one group's block
table (acceptance 94.8 % -> 5.3 % / 57.4 % depending on PYTHONHASHSEED).
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mtpbench.fixes import ascend_api
from mtpbench.fixes.ascend_api import AscendModules, detect
from mtpbench.fixes.ascend_gemma4 import install, load_modules
from mtpbench.fixes.layer_source import (
    LayerResolvedSource,
    MissingLayerMetadata,
    delegating_shared_get,
    is_param_source,
)
from mtpbench.fixes.registry import apply_one
from mtpbench.patches.contract import PATCHES_ENV, PatchNotApplicable

REPO = Path(__file__).resolve().parents[3]
PATCH = "ascend-gemma4-layer-params"

SLIDING = ("draft.attn.0", "draft.attn.1", "draft.attn.2")  # read a sliding-attention target layer's KV
FULL = ("draft.attn.3",)  # reads a full-attention target layer's KV


# ---------------------------------------------------------------------------------------------------
# Small stand-ins for vllm-ascend objects
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Meta:
    """Stands in for AscendMetadata: what a draft layer's attention kernel is fed at one step (the fields
    vllm-ascend tests/ut/spec_decode/test_gemma4_proposer.py @ 0743d9f1 gives its `metadata()` helper:
    block_tables, seq_lens_list; a test, not code)."""

    block_tables: str
    seq_lens_list: tuple[int, ...]


@dataclass(frozen=True)
class Provider:
    """Mirrors the `_layer_provider` of vllm-ascend tests/ut/spec_decode/test_gemma4_proposer.py @ 0743d9f1
    (a test, not code): `layer_name` plus `resolve(step_metadata)` reading `step_metadata[layer_name]`,
    returning its block table and kv sequence lengths (the test also returns actual_seq_lengths)."""

    layer_name: str

    def resolve(self, attn_metadata: Any) -> dict[str, Any]:
        m = attn_metadata[self.layer_name]
        return {"block_table": m.block_tables, "actual_seq_lengths_kv": m.seq_lens_list}


class NamelessProvider:
    """A provider with no layer name: reads whatever single layer it is shown."""

    def resolve(self, attn_metadata: Any) -> dict[str, Any]:
        (m,) = attn_metadata.values()
        return {"block_table": m.block_tables}


def two_group_steps(k: int = 3, full_first: bool = False) -> list[dict[str, Meta]]:
    """Per-step, per-layer draft metadata of a Gemma4 MTP draft: two KV-cache groups per step.

    `full_first` changes only the mapping's order, as a different PYTHONHASHSEED changes set order.
    """
    steps = []
    for step in range(k):
        sliding = Meta(f"sliding-blocks@{step}", (10 + step,))
        full = Meta(f"full-blocks@{step}", (20 + step,))
        layers = [(n, sliding) for n in SLIDING] + [(n, full) for n in FULL]
        if full_first:
            layers = layers[len(SLIDING) :] + layers[: len(SLIDING)]
        steps.append(dict(layers))
    return steps


def stock_params(steps: Sequence[dict[str, Meta]]) -> list[dict[str, Any]]:
    """What the flattening proposer computes: one representative (first) layer per step."""
    out = []
    for step in steps:
        m = next(iter(step.values()))
        out.append({"block_table": m.block_tables, "actual_seq_lengths_kv": m.seq_lens_list})
    return out


class FakeGraph:
    """Mirrors UpdatableGraph in vllm_ascend/compilation/updatable_graph.py @ 6f1ce9b8 (code): tasks numbered
    per provider in capture order (register_task, :103-128); resolve_tasks (:130-137) calls
    `source.get(provider)` once per provider, asserts one entry per task, binds entry [provider_index]."""

    def __init__(self, providers: Sequence[Any], k: int) -> None:
        # Draft graphs register each layer's task once per draft step, in step order.
        self.tasks = [(p, step) for step in range(k) for p in providers]
        self.provider_sizes = {p: k for p in providers}

    def resolve_tasks(self, source: Any) -> dict[tuple[str, int], dict[str, Any]]:
        by_provider = {p: source.get(p) for p in self.provider_sizes}
        for p, size in self.provider_sizes.items():
            assert len(by_provider[p]) == size
        return {(getattr(p, "layer_name", "?"), i): by_provider[p][i] for p, i in self.tasks}


class FakeGraphWrapper:
    """The graph wrapper the unit tests describe (tests, not code): `update_draft_model_metadata(params)` and
    `set_attn_backend(backend)` as asserted in vllm-ascend's base-proposer unit test
    (`test_updates_each_draft_step_and_attention_layer`, a stored tests/ut/spec_decode file whose commit the
    index does not name) and in test_gemma4_proposer.py @ 0743d9f1; replay wraps what it holds in
    `SharedSource(...)` as acl_graph.py @ 6f1ce9b8 `_updatable_graph_replay` does with its own list."""

    def __init__(self, graph: FakeGraph, shared_source: type) -> None:
        self.graph = graph
        self.shared_source = shared_source
        self.draft_model_metadata: Any = None
        self.attn_backend: Any = None

    def update_draft_model_metadata(self, params: Any) -> None:
        self.draft_model_metadata = params

    def set_attn_backend(self, backend: Any) -> None:
        self.attn_backend = backend

    def replay(self) -> dict[tuple[str, int], dict[str, Any]]:
        return self.graph.resolve_tasks(self.shared_source(self.draft_model_metadata))


# --- SharedSource shapes found in vllm-ascend and its forks (the README's Ascend shapes table) ---------


def shared_source_sequence() -> type:
    # vllm_ascend/compilation/updatable_graph.py @ 6f1ce9b8 :38-46 (code): the same per-step list for all.
    @dataclass(frozen=True, slots=True)
    class SharedSource:
        params: Sequence[dict[str, Any]]

        def get(self, _provider: Any) -> Sequence[dict[str, Any]]:
            return self.params

    return SharedSource


def shared_source_layer_tagged() -> type:
    # updatable_graph.py (code) in zzhx1 34bb51f9, zhenwenqi2024 51ac0e0c, lqh-hh 41248962, vLLM-HUST
    # 5331e27c: params tagged per layer, each provider keeps its own entries.
    @dataclass(frozen=True, slots=True)
    class SharedSource:
        params: Sequence[dict[str, Any]]

        def get(self, _provider: Any) -> Sequence[dict[str, Any]]:
            name = getattr(_provider, "layer_name", None)
            return [
                {k: v for k, v in p.items() if k != "layer_name"} for p in self.params if p.get("layer_name") == name
            ]

    return SharedSource


def shared_source_indexed() -> type:
    # updatable_graph.py @ vllm-project/vllm-ascend 3c708ca1 (code): one params dict per task index.
    @dataclass(frozen=True, slots=True)
    class SharedSource:
        params: Sequence[dict[str, Any]]

        def get(self, _provider: Any, index: int) -> dict[str, Any]:
            return self.params[index]

    return SharedSource


def shared_source_delegating() -> type:
    # PR #16737's shape (closed, not merged) as test_gemma4_proposer.py @ 0743d9f1 implies it (a test, not
    # code: a `_LayerResolvedSource` reaches SharedSource's place); its implementation was not found.
    @dataclass(frozen=True, slots=True)
    class SharedSource:
        params: Any

        def get(self, provider: Any) -> Sequence[dict[str, Any]]:
            if callable(getattr(self.params, "get", None)) and not isinstance(self.params, (list, tuple, dict)):
                return self.params.get(provider)
            return self.params

    return SharedSource


def flattening_base_proposer_module() -> types.ModuleType:
    """The shape the installer patches. Not seen in any readable implementation: the hook, its guard and its
    two calls are those the unit tests assert (`_maybe_update_metadata(backend, multi_steps)` ->
    `_runnable.update_draft_model_metadata(list)` then `_runnable.set_attn_backend(backend)`, skipped when
    `_runnable` has no `update_draft_model_metadata`), and the list it hands over is what 6f1ce9b8's
    `_build_draft_attn_metadata_updates` (llm_base_proposer.py:606-617, code) builds: one representative
    layer per step. The base-proposer unit test instead expects layer-tagged entries; see
    `layer_tagged_base_proposer_module`."""

    class AscendSpecDecodeBaseProposer:
        _runnable: Any

        def _maybe_update_metadata(self, attn_backend: Any, multi_steps_attn_metadata: Any) -> None:
            if not callable(getattr(self._runnable, "update_draft_model_metadata", None)):
                return
            # The bug: one representative layer per draft step.
            self._runnable.update_draft_model_metadata(stock_params(multi_steps_attn_metadata))
            self._runnable.set_attn_backend(attn_backend)

        def _propose(self, attn_backend: Any, multi_steps_attn_metadata: Any) -> None:
            # The draft loop, reduced to the call that matters here: it reaches the hook.
            self._maybe_update_metadata(attn_backend, multi_steps_attn_metadata)

    mod = types.ModuleType(ascend_api.BASE_PROPOSER)
    mod.AscendSpecDecodeBaseProposer = AscendSpecDecodeBaseProposer  # type: ignore[attr-defined]
    return mod


def gemma4_module(base_module: types.ModuleType, *, upstream_fix: bool = False) -> types.ModuleType:
    """AscendGemma4Proposer; with `upstream_fix` (PR #16737's shape, closed without being merged), the
    override that test_gemma4_proposer.py @ 0743d9f1 (`test_maybe_update_metadata_installs_layer_resolved_
    source`, a test, not code) asserts: its `_maybe_update_metadata` hands a `_LayerResolvedSource` to
    `update_draft_model_metadata`."""
    base = base_module.AscendSpecDecodeBaseProposer

    class AscendGemma4Proposer(base):  # type: ignore[misc, valid-type]
        pass

    mod = types.ModuleType(ascend_api.GEMMA4_PROPOSER)
    if upstream_fix:

        class _LayerResolvedSource:
            pass

        def _maybe_update_metadata(self: Any, attn_backend: Any, multi_steps_attn_metadata: Any) -> None:
            self._runnable.update_draft_model_metadata(_LayerResolvedSource())

        AscendGemma4Proposer._maybe_update_metadata = _maybe_update_metadata  # type: ignore[attr-defined]
        mod._LayerResolvedSource = _LayerResolvedSource  # type: ignore[attr-defined]
    mod.AscendGemma4Proposer = AscendGemma4Proposer  # type: ignore[attr-defined]
    return mod


def acl_graph_module(wrapper: type | None = None) -> types.ModuleType:
    """vllm_ascend.compilation.acl_graph holding the draft wrapper class (FakeGraphWrapper by default)."""
    mod = types.ModuleType(ascend_api.ACL_GRAPH)
    mod.ACLGraphWrapper = wrapper or FakeGraphWrapper  # type: ignore[attr-defined]
    return mod


def fake_modules(shared: Callable[[], type] = shared_source_sequence, upstream_fix: bool = False) -> AscendModules:
    ug = types.ModuleType(ascend_api.UPDATABLE_GRAPH)
    ug.SharedSource = shared()  # type: ignore[attr-defined]
    base = flattening_base_proposer_module()
    return AscendModules(ug, base, gemma4_module(base, upstream_fix=upstream_fix), acl_graph_module())


def snapshot(modules: AscendModules) -> tuple[Any, Any, Any]:
    return (
        modules.updatable_graph.SharedSource.__dict__.get("get"),
        modules.gemma4_proposer.AscendGemma4Proposer.__dict__.get("_maybe_update_metadata"),
        modules.base_proposer.AscendSpecDecodeBaseProposer.__dict__.get("_maybe_update_metadata"),
    )


def run_draft_step(modules: AscendModules, steps: list[dict[str, Meta]], cls: type | None = None) -> dict:
    """One proposer metadata update + one draft graph replay; returns what each (layer, step) task got."""
    providers = [Provider(n) for n in (*SLIDING, *FULL)]
    wrapper = FakeGraphWrapper(FakeGraph(providers, len(steps)), modules.updatable_graph.SharedSource)
    proposer = (cls or modules.gemma4_proposer.AscendGemma4Proposer)()
    proposer._runnable = wrapper
    proposer._maybe_update_metadata("backend", steps)
    assert wrapper.attn_backend == "backend"
    return wrapper.replay()


# ---------------------------------------------------------------------------------------------------
# The layer-resolved source (pure logic)
# ---------------------------------------------------------------------------------------------------


def test_two_kv_groups_get_their_own_params_per_step() -> None:
    steps = two_group_steps()
    source = LayerResolvedSource(steps)
    for name in SLIDING:
        assert [p["block_table"] for p in source.get(Provider(name))] == [f"sliding-blocks@{i}" for i in range(3)]
        assert [p["actual_seq_lengths_kv"] for p in source.get(Provider(name))] == [(10,), (11,), (12,)]
    full = source.get(Provider("draft.attn.3"))
    assert [p["block_table"] for p in full] == ["full-blocks@0", "full-blocks@1", "full-blocks@2"]
    assert [p["actual_seq_lengths_kv"] for p in full] == [(20,), (21,), (22,)]


def test_resolution_does_not_depend_on_layer_order() -> None:
    # The stock bug depended on which group came first (set order, i.e. PYTHONHASHSEED); the fix must not.
    a, b = LayerResolvedSource(two_group_steps()), LayerResolvedSource(two_group_steps(full_first=True))
    for name in (*SLIDING, *FULL):
        assert a.get(Provider(name)) == b.get(Provider(name))


def test_provider_without_layer_name_falls_back_to_representative_layer() -> None:
    steps = two_group_steps(full_first=True)
    stock = stock_params(steps)
    assert LayerResolvedSource(steps, representative_params=stock).get(NamelessProvider()) == stock
    # Without the stock list, the representative is the first layer of each step.
    got = LayerResolvedSource(steps).get(NamelessProvider())
    assert [p["block_table"] for p in got] == ["full-blocks@0", "full-blocks@1", "full-blocks@2"]


def test_step_missing_the_providers_layer_is_a_clear_error() -> None:
    steps = two_group_steps()
    del steps[1]["draft.attn.3"]
    with pytest.raises(MissingLayerMetadata) as err:
        LayerResolvedSource(steps).get(Provider("draft.attn.3"))
    assert err.value.step == 1 and err.value.layer_name == "draft.attn.3"
    assert "draft step 1" in str(err.value) and "'draft.attn.3'" in str(err.value)
    assert "refusing to bind another layer's block table" in str(err.value)


def test_provider_sees_only_its_own_layer() -> None:
    class Greedy:
        layer_name = "draft.attn.0"

        def resolve(self, attn_metadata: Any) -> dict[str, Any]:
            return {"block_table": attn_metadata["draft.attn.3"].block_tables}  # another layer's table

    with pytest.raises(KeyError):
        LayerResolvedSource(two_group_steps()).get(Greedy())


def test_stock_params_must_be_one_per_step() -> None:
    steps = two_group_steps()
    with pytest.raises(ValueError, match="3 draft steps"):
        LayerResolvedSource(steps, representative_params=stock_params(steps)[:2])


def test_param_source_recognition() -> None:
    assert is_param_source(LayerResolvedSource([]))
    for plain in ([], (), [{"block_table": 1}], {"get": 1}, None, "abc"):
        assert not is_param_source(plain)


def test_shared_source_delegation_keeps_old_behaviour_for_a_plain_list() -> None:
    shared = shared_source_sequence()
    original = shared.get
    shared.get = delegating_shared_get(original)  # type: ignore[method-assign]
    plain = stock_params(two_group_steps())
    assert shared(plain).get(Provider("draft.attn.3")) is plain  # unchanged: same list for everyone
    assert shared(plain).get(NamelessProvider()) is plain
    source = LayerResolvedSource(two_group_steps(), representative_params=plain)
    full = shared(source).get(Provider("draft.attn.3"))
    assert [p["block_table"] for p in full] == ["full-blocks@0", "full-blocks@1", "full-blocks@2"]
    assert shared.get.__wrapped__ is original  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------------
# API shape detection
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shared", "upstream_fix", "shape", "refusal"),
    [
        (shared_source_sequence, False, ascend_api.SEQUENCE, ""),
        (
            shared_source_layer_tagged,
            False,
            ascend_api.LAYER_TAGGED,
            "already resolves draft params per layer",
        ),
        (shared_source_delegating, True, ascend_api.DELEGATING, "already resolves draft params per layer"),
        (shared_source_sequence, True, ascend_api.SEQUENCE, "PR #16737, closed without being merged"),
        (shared_source_indexed, False, ascend_api.INDEXED, "unrecognised vllm-ascend draft-graph API"),
    ],
    ids=["flattening", "layer-tagged", "pr16737-delegating", "gemma4-overrides", "per-task-index"],
)
def test_detection_recognises_each_upstream_shape(
    shared: Callable[[], type], upstream_fix: bool, shape: str, refusal: str
) -> None:
    found = detect(fake_modules(shared, upstream_fix=upstream_fix))
    assert found.shared_source == shape
    assert (found.refusal == "") if not refusal else (refusal in found.refusal)


def test_detection_refuses_unknown_shared_source() -> None:
    @dataclass(frozen=True)
    class SharedSource:
        params: Any

        def get(self, provider: Any) -> Any:
            return {"something": "else"}

    modules = fake_modules()
    modules.updatable_graph.SharedSource = SharedSource
    found = detect(modules)
    assert found.shared_source.startswith("unknown")
    assert "unrecognised" in found.refusal


def test_detection_refuses_proposer_without_the_metadata_hook() -> None:
    modules = fake_modules()
    del modules.base_proposer.AscendSpecDecodeBaseProposer._maybe_update_metadata
    found = detect(modules)
    assert found.proposer.startswith("unknown") and "_maybe_update_metadata" in found.refusal


def test_detection_refuses_build_without_gemma4_proposer_class() -> None:
    modules = fake_modules()
    del modules.gemma4_proposer.AscendGemma4Proposer
    assert "no AscendGemma4Proposer" in detect(modules).refusal


# ---------------------------------------------------------------------------------------------------
# The installer
# ---------------------------------------------------------------------------------------------------


def test_stock_flattening_binds_one_groups_block_table_to_every_layer() -> None:
    # The regression itself, reproduced on the fake shape: which table wins depends on layer order.
    for full_first, wrong in ((False, "sliding"), (True, "full")):
        bound = run_draft_step(fake_modules(), two_group_steps(full_first=full_first))
        assert {p["block_table"].split("-")[0] for p in bound.values()} == {wrong}


def test_fixed_proposer_binds_each_layer_its_own_group_in_any_order() -> None:
    for full_first in (False, True):
        modules = fake_modules()
        install(modules)
        bound = run_draft_step(modules, two_group_steps(full_first=full_first))
        for step in range(3):
            for name in SLIDING:
                assert bound[(name, step)]["block_table"] == f"sliding-blocks@{step}"
            assert bound[("draft.attn.3", step)]["block_table"] == f"full-blocks@{step}"


def test_install_leaves_other_proposers_stock() -> None:
    modules = fake_modules()
    _, _, base_before = snapshot(modules)
    install(modules)
    assert snapshot(modules)[2] is base_before
    bound = run_draft_step(modules, two_group_steps(), cls=modules.base_proposer.AscendSpecDecodeBaseProposer)
    assert {p["block_table"].split("-")[0] for p in bound.values()} == {"sliding"}


def test_fixed_proposer_skips_like_stock_without_a_graph_wrapper() -> None:
    modules = fake_modules()
    install(modules)
    proposer = modules.gemma4_proposer.AscendGemma4Proposer()
    proposer._runnable = lambda: None  # eager draft: no update_draft_model_metadata
    assert proposer._maybe_update_metadata("backend", two_group_steps()) is None


def test_fixed_proposer_restores_the_wrapper_after_each_update() -> None:
    modules = fake_modules()
    install(modules)
    providers = [Provider(n) for n in (*SLIDING, *FULL)]
    wrapper = FakeGraphWrapper(FakeGraph(providers, 3), modules.updatable_graph.SharedSource)
    proposer = modules.gemma4_proposer.AscendGemma4Proposer()
    proposer._runnable = wrapper
    proposer._maybe_update_metadata("backend", two_group_steps())
    assert "update_draft_model_metadata" not in vars(wrapper)
    assert isinstance(wrapper.draft_model_metadata, LayerResolvedSource)


def test_install_describes_the_change_and_is_idempotent() -> None:
    modules = fake_modules()
    first = install(modules, "0.0.0-test")
    assert "per-layer param source" in first and ascend_api.SEQUENCE in first and "0.0.0-test" in first
    patched = snapshot(modules)
    again = install(modules)
    assert "already installed" in again
    assert snapshot(modules) == patched
    bound = run_draft_step(modules, two_group_steps(full_first=True))
    assert bound[("draft.attn.0", 0)]["block_table"] == "sliding-blocks@0"


def test_install_completes_a_half_installed_build() -> None:
    modules = fake_modules()
    install(modules)
    modules.updatable_graph.SharedSource = shared_source_sequence()  # as after a module reload
    assert detect(modules).patchable
    install(modules)
    assert detect(modules).installed


@pytest.mark.parametrize(
    ("shared", "upstream_fix"),
    [(shared_source_layer_tagged, False), (shared_source_delegating, True), (shared_source_indexed, False)],
    ids=["layer-tagged", "pr16737-delegating", "per-task-index"],
)
def test_refused_install_changes_nothing(shared: Callable[[], type], upstream_fix: bool) -> None:
    modules = fake_modules(shared, upstream_fix=upstream_fix)
    before = snapshot(modules)
    with pytest.raises(PatchNotApplicable) as err:
        install(modules)
    assert "\n" not in str(err.value)
    assert snapshot(modules) == before


def test_load_modules_refuses_a_build_without_updatable_graph() -> None:
    def importer(name: str) -> types.ModuleType:
        if name == ascend_api.UPDATABLE_GRAPH:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return types.ModuleType(name)

    with pytest.raises(PatchNotApplicable, match=r"has no .*updatable_graph module .*update_full_graph_params"):
        load_modules(importer)


def test_load_modules_refuses_a_build_without_the_gemma4_proposer() -> None:
    def importer(name: str) -> types.ModuleType:
        if name == ascend_api.GEMMA4_PROPOSER:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return types.ModuleType(name)

    with pytest.raises(PatchNotApplicable, match="no Gemma4 proposer"):
        load_modules(importer)


def test_load_modules_reports_a_broken_dependency_in_one_line() -> None:
    def importer(name: str) -> types.ModuleType:
        if name == ascend_api.UPDATABLE_GRAPH:
            raise ModuleNotFoundError("No module named 'torch_npu'\nmore detail", name="torch_npu")
        return types.ModuleType(name)

    with pytest.raises(PatchNotApplicable) as err:
        load_modules(importer)
    assert "torch_npu" in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------------
# apply() and the plugin entry point
# ---------------------------------------------------------------------------------------------------


def _without_vllm_ascend(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import vllm_ascend` raise ImportError even where it is installed.
    monkeypatch.setitem(sys.modules, "vllm_ascend", None)  # type: ignore[arg-type]


def _install_fake_vllm_ascend(monkeypatch: pytest.MonkeyPatch) -> AscendModules:
    modules = fake_modules()
    install_fake_package(monkeypatch, modules)
    return modules


def install_fake_package(monkeypatch: pytest.MonkeyPatch, modules: AscendModules) -> None:
    """Make `modules` importable as vllm_ascend's proposer/graph modules (also used by the 6f1ce9b8 tests)."""
    package = types.ModuleType("vllm_ascend")
    package.__path__ = []  # type: ignore[attr-defined]
    for name, module in [
        ("vllm_ascend", package),
        ("vllm_ascend.compilation", types.ModuleType("vllm_ascend.compilation")),
        ("vllm_ascend.spec_decode", types.ModuleType("vllm_ascend.spec_decode")),
        (ascend_api.UPDATABLE_GRAPH, modules.updatable_graph),
        (ascend_api.BASE_PROPOSER, modules.base_proposer),
        (ascend_api.GEMMA4_PROPOSER, modules.gemma4_proposer),
        (ascend_api.ACL_GRAPH, modules.acl_graph),  # None: the import raises, as without the module
    ]:
        monkeypatch.setitem(sys.modules, name, module)


def test_apply_without_vllm_ascend_raises_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_vllm_ascend(monkeypatch)
    before = set(sys.modules)
    outcome = apply_one(PATCH)
    assert outcome.status == "not-applicable"
    assert outcome.detail.startswith("fix not applied: vllm_ascend is not importable here")
    assert "\n" not in outcome.detail
    assert {m for m in set(sys.modules) - before if m.startswith("vllm_ascend")} == set()


def test_apply_patches_an_importable_flattening_build(monkeypatch: pytest.MonkeyPatch) -> None:
    modules = _install_fake_vllm_ascend(monkeypatch)
    outcome = apply_one(PATCH)
    assert outcome.status == "applied", outcome.detail
    assert detect(modules).installed
    assert apply_one(PATCH).status == "applied"  # idempotent: a second request is harmless


def _run_python(code: str, env_patches: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != PATCHES_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if env_patches is not None:
        env[PATCHES_ENV] = env_patches
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_plugin_is_inert_without_the_variable() -> None:
    # A fresh interpreter, so nothing imported by other tests hides an import made by register().
    code = (
        "import sys, mtpbench.plugin as p\n"
        "out = p.register()\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('mtpbench.fixes', 'vllm')))\n"
        "print(repr(out)); print(loaded)\n"
    )
    done = _run_python(code, env_patches=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "[]"]


def test_plugin_is_inert_with_an_empty_variable() -> None:
    done = _run_python("import mtpbench.plugin as p; print(p.register())", env_patches=" , ")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_plugin_applies_the_requested_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    from mtpbench import plugin

    modules = _install_fake_vllm_ascend(monkeypatch)
    monkeypatch.setenv(PATCHES_ENV, PATCH)
    outcomes = plugin.register()
    assert [(o.name, o.status) for o in outcomes] == [(PATCH, "applied")]
    assert detect(modules).installed


def test_plugin_reports_not_applicable_without_vllm_ascend(monkeypatch: pytest.MonkeyPatch) -> None:
    from mtpbench import plugin

    _without_vllm_ascend(monkeypatch)
    monkeypatch.setenv(PATCHES_ENV, PATCH)
    (outcome,) = plugin.register()
    assert outcome.status == "not-applicable"


# ---------------------------------------------------------------------------------------------------
# The real vllm_ascend, where it imports
# ---------------------------------------------------------------------------------------------------


def _real_vllm_ascend_unavailable() -> str:
    try:
        __import__(ascend_api.UPDATABLE_GRAPH)
    except Exception as exc:  # any import failure means: cannot test against it here
        first = (str(exc).strip().splitlines() or [""])[0]
        why = f"{type(exc).__name__}: {first}"
        return f"vllm_ascend's UpdatableGraph API is not importable here (needs torch_npu): {why}"
    return ""


REAL_SKIP = _real_vllm_ascend_unavailable()


@pytest.mark.skipif(bool(REAL_SKIP), reason=REAL_SKIP)
def test_against_the_real_vllm_ascend() -> None:
    # In a subprocess: applying patches the real classes, which must not leak into other tests.
    code = f"""
import sys
from mtpbench.fixes.ascend_api import detect
from mtpbench.fixes.ascend_gemma4 import load_modules
from mtpbench.fixes.layer_source import LayerResolvedSource
from mtpbench.fixes.registry import apply_one
try:
    modules = load_modules()
except Exception as exc:
    print("NOT-APPLICABLE", exc); sys.exit(0)
found = detect(modules)
print("SHAPE", found.shared_source, found.proposer, found.refusal)
outcome = apply_one({PATCH!r})
print("OUTCOME", outcome.status, outcome.detail)
if outcome.status == "applied":
    class P:
        layer_name = "l1"
        def resolve(self, md):
            return {{"v": md["l1"]}}
    steps = [{{"l0": 0, "l1": 1}}, {{"l0": 2, "l1": 3}}]
    got = modules.updatable_graph.SharedSource(LayerResolvedSource(steps)).get(P())
    assert list(got) == [{{"v": 1}}, {{"v": 3}}], got
    plain = [{{"v": 9}}]
    assert modules.updatable_graph.SharedSource(plain).get(P()) is plain
    print("DELEGATION OK")
sys.exit(1 if outcome.status == "failed" else 0)
"""
    done = _run_python(code, env_patches=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OUTCOME failed" not in done.stdout


# --- The base-proposer shape vllm-ascend's unit test asserts (layer-tagged entries) ---------------------


def layer_tagged_base_proposer_module() -> types.ModuleType:
    """Mirrors vllm-ascend's base-proposer unit test `test_updates_each_draft_step_and_attention_layer` (a
    stored tests/ut/spec_decode file importing AscendSpecDecodeBaseProposer; a test, not code):
    `_maybe_update_metadata(backend, multi_steps)` calls `_runnable.update_draft_model_metadata` once with
    one entry per (step, layer) in step order, each `{"layer_name", "actual_seq_lengths",
    "actual_seq_lengths_kv", "block_table"}`, then `_runnable.set_attn_backend(backend)`."""

    class AscendSpecDecodeBaseProposer:
        _runnable: Any

        def _maybe_update_metadata(self, attn_backend: Any, multi_steps_attn_metadata: Any) -> None:
            if not callable(getattr(self._runnable, "update_draft_model_metadata", None)):
                return
            self._runnable.update_draft_model_metadata(
                [
                    {
                        "layer_name": name,
                        "actual_seq_lengths": (1,),
                        "actual_seq_lengths_kv": m.seq_lens_list,
                        "block_table": m.block_tables,
                    }
                    for step in multi_steps_attn_metadata
                    for name, m in step.items()
                ]
            )
            self._runnable.set_attn_backend(attn_backend)

        def _propose(self, attn_backend: Any, multi_steps_attn_metadata: Any) -> None:
            self._maybe_update_metadata(attn_backend, multi_steps_attn_metadata)

    mod = types.ModuleType(ascend_api.BASE_PROPOSER)
    mod.AscendSpecDecodeBaseProposer = AscendSpecDecodeBaseProposer  # type: ignore[attr-defined]
    return mod


def test_installed_hook_passes_a_layer_tagged_list_through_unchanged() -> None:
    # Where the two upstream shapes disagree (representative list vs layer-tagged list from the same hook),
    # the installed wrapper must not re-wrap an already per-layer list: that would misalign the steps.
    ug = types.ModuleType(ascend_api.UPDATABLE_GRAPH)
    ug.SharedSource = shared_source_sequence()  # type: ignore[attr-defined]
    base = layer_tagged_base_proposer_module()
    modules = AscendModules(ug, base, gemma4_module(base), acl_graph_module())
    install(modules)
    wrapper = FakeGraphWrapper(FakeGraph([], 3), modules.updatable_graph.SharedSource)
    proposer = modules.gemma4_proposer.AscendGemma4Proposer()
    proposer._runnable = wrapper
    steps = two_group_steps()
    proposer._maybe_update_metadata("backend", steps)
    held = wrapper.draft_model_metadata
    assert isinstance(held, list) and len(held) == 3 * 4
    assert [p["layer_name"] for p in held[:4]] == list(steps[0])
    assert wrapper.attn_backend == "backend"


def test_layer_tagged_hook_with_layer_tagged_shared_source_is_left_alone() -> None:
    ug = types.ModuleType(ascend_api.UPDATABLE_GRAPH)
    ug.SharedSource = shared_source_layer_tagged()  # type: ignore[attr-defined]
    base = layer_tagged_base_proposer_module()
    modules = AscendModules(ug, base, gemma4_module(base), acl_graph_module())
    before = snapshot(modules)
    with pytest.raises(PatchNotApplicable, match="already resolves draft params per layer"):
        install(modules)
    assert snapshot(modules) == before
