"""Unit tests for the `flatten-draft-metadata` fault: the pure flattening, the not-applicable path, the
wrapper's behaviour and idempotence on a fake Gemma4 proposer, the hash-seed dependence of the group
order, and (where vLLM is installed) that it patches the real class without starting an engine."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from typing import Any

import pytest

from mtpbench.fixes.registry import apply_one
from mtpbench.patches import PatchNotApplicable
from mtpbench.patches.faults import flatten_draft_metadata as flatten

MODULE = "vllm.v1.spec_decode.gemma4"
METHOD = "build_per_group_and_layer_attn_metadata"
SLIDING = [f"draft_model.layers.{i}.self_attn.attn" for i in range(3)]
FULL = "draft_model.layers.3.self_attn.attn"


class _Group:
    def __init__(self, gid: int, layer_names: list[str]) -> None:
        self.kv_cache_group_id = gid
        self.layer_names = layer_names


def _fake_module(with_method: bool = True) -> types.ModuleType:
    """A stand-in for vllm.v1.spec_decode.gemma4 whose proposer builds one metadata object per group."""

    class Gemma4Proposer:
        def __init__(self, order: list[str]) -> None:
            # vLLM keeps a set; a list here fixes the iteration order the test wants to see honoured.
            self._draft_attn_layer_names = order
            self.draft_attn_groups = [_Group(3, list(SLIDING)), _Group(4, [FULL])]

    if with_method:

        def build(self: Any, common: object, draft_index: int = 0) -> tuple[list[object], dict[str, object]]:
            per_group: list[object] = []
            per_layer: dict[str, object] = {}
            for group in self.draft_attn_groups:
                md = ("md", group.kv_cache_group_id, common, draft_index)
                per_group.append(md)
                per_layer.update(dict.fromkeys(group.layer_names, md))
            return per_group, per_layer

        setattr(Gemma4Proposer, METHOD, build)

    module = types.ModuleType(MODULE)
    module.Gemma4Proposer = Gemma4Proposer  # type: ignore[attr-defined]
    return module


@pytest.fixture(autouse=True)
def _fresh_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flatten, "_chosen", {})


# --- pure logic -------------------------------------------------------------------------------------


def test_flatten_binds_every_layer_to_first_in_order() -> None:
    per_layer = {"a": 1, "b": 1, "c": 2}
    assert flatten.flatten_layer_metadata(per_layer, ["c", "a", "b"]) == {"a": 2, "b": 2, "c": 2}
    assert flatten.flatten_layer_metadata(per_layer, ["b", "c"]) == {"a": 1, "b": 1, "c": 1}
    assert per_layer == {"a": 1, "b": 1, "c": 2}  # input untouched


def test_flatten_skips_names_without_metadata_and_keeps_keys() -> None:
    md_full, md_slide = object(), object()
    per_layer = {"s0": md_slide, "s1": md_slide, "f": md_full}
    flat = flatten.flatten_layer_metadata(per_layer, iter(["absent", "f", "s0"]))
    assert list(flat) == ["s0", "s1", "f"]
    assert all(v is md_full for v in flat.values())


def test_flatten_without_representative_is_a_copy() -> None:
    per_layer = {"a": 1, "b": 2}
    flat = flatten.flatten_layer_metadata(per_layer, ["x"])
    assert flat == per_layer and flat is not per_layer
    assert flatten.representative_layer(per_layer, []) is None
    assert flatten.flatten_layer_metadata({}, ["a"]) == {}


# --- apply() on fakes --------------------------------------------------------------------------------


def test_not_applicable_without_gemma4_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, MODULE, None)  # makes the import fail like a build without the file
    with pytest.raises(PatchNotApplicable, match="no Gemma4 MTP proposer"):
        flatten.apply()
    outcome = apply_one("flatten-draft-metadata")
    assert outcome.status == "not-applicable"


def test_not_applicable_without_method_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _fake_module(with_method=False)
    monkeypatch.setitem(sys.modules, MODULE, module)
    before = dict(vars(module.Gemma4Proposer))
    with pytest.raises(PatchNotApplicable, match=METHOD):
        flatten.apply()
    assert dict(vars(module.Gemma4Proposer)) == before


def test_not_applicable_without_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, MODULE, types.ModuleType(MODULE))
    with pytest.raises(PatchNotApplicable, match="Gemma4Proposer"):
        flatten.apply()


@pytest.mark.parametrize(
    ("order", "winner_gid"),
    [([SLIDING[1], FULL, SLIDING[0], SLIDING[2]], 3), ([FULL, *SLIDING], 4)],
)
def test_wrapper_flattens_to_group_of_first_layer_in_set_order(
    monkeypatch: pytest.MonkeyPatch, order: list[str], winner_gid: int
) -> None:
    module = _fake_module()
    monkeypatch.setitem(sys.modules, MODULE, module)
    proposer = module.Gemma4Proposer(order)
    stock_groups, stock_layers = getattr(proposer, METHOD)("cm", draft_index=1)

    line = flatten.apply()
    assert f"{MODULE}.Gemma4Proposer.{METHOD}" in line

    per_group, per_layer = getattr(proposer, METHOD)("cm", draft_index=1)
    assert per_group == stock_groups  # vLLM only type-checks the per-group list
    assert list(per_layer) == list(stock_layers)
    assert {id(v) for v in per_layer.values()} == {id(per_layer[order[0]])}
    assert per_layer[order[0]] == ("md", winner_gid, "cm", 1)
    assert flatten.chosen() == {"layer": order[0], "kv_cache_group_id": winner_gid}


def test_apply_is_idempotent(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _fake_module()
    monkeypatch.setitem(sys.modules, MODULE, module)
    first = flatten.apply()
    wrapped = vars(module.Gemma4Proposer)[METHOD]
    assert flatten.apply() == first
    assert vars(module.Gemma4Proposer)[METHOD] is wrapped
    _, per_layer = getattr(module.Gemma4Proposer([FULL, *SLIDING]), METHOD)("cm")
    assert len({id(v) for v in per_layer.values()}) == 1  # wrapped once, still correct


def test_inert_unless_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _fake_module()
    monkeypatch.setitem(sys.modules, MODULE, module)
    original = vars(module.Gemma4Proposer)[METHOD]
    assert (
        vars(module.Gemma4Proposer)[METHOD] is original
    )  # importing mtpbench.patches.faults.flatten_draft_metadata patched nothing
    assert flatten.chosen() == {}


# --- the group order follows PYTHONHASHSEED ---------------------------------------------------------

# Builds the draft-layer set as LLMBaseProposer.load_model does (vLLM 0.32: set of all attention layer
# names minus the target's, filtered by a comprehension) and prints the layer iteration meets first.
_ORDER_PROBE = """
t = [f"model.layers.{i}.self_attn.attn" for i in range(5)]
d = [f"draft_model.layers.{i}.self_attn.attn" for i in range(4)]
names = {n for n in (set(dict.fromkeys(t + d)) - set(t))}
print(next(iter(names)))
"""


def _first_layer(seed: int) -> str:
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    out = subprocess.run([sys.executable, "-c", _ORDER_PROBE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_hash_seed_decides_the_group() -> None:
    # Seeds 0 and 2 are the selftest's pair: sliding group first vs full-attention group first.
    assert _first_layer(0) in SLIDING
    assert _first_layer(2) == FULL
    assert _first_layer(0) == _first_layer(0)  # deterministic per seed


# --- the real vLLM class (no engine) -----------------------------------------------------------------


def test_patches_real_vllm_class(monkeypatch: pytest.MonkeyPatch) -> None:
    gemma4 = pytest.importorskip(MODULE)
    cls = gemma4.Gemma4Proposer
    # Re-set the current attribute through monkeypatch so teardown restores stock vLLM for other tests.
    monkeypatch.setattr(cls, METHOD, getattr(cls, METHOD))
    line = flatten.apply()
    assert "Gemma4Proposer" in line
    assert getattr(getattr(cls, METHOD), "__mtpbench_flatten_draft_metadata__", False)
    assert flatten.apply() == line
