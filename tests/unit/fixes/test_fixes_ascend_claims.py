"""The `ascend-gemma4-layer-params` fix must not say `applied` where it changes nothing (issue 21, part 3).

Three builds on which the installer used to report `applied` while the draft kept its flattened params:

- the four-argument hook of vllm-ascend PR #15908's review diff (llm_base_proposer.py:633 of that diff,
  review thread of 2026-09-10, a review excerpt, not merged code): `_maybe_update_metadata(self,
  att_backend, aclgraph_runtime_mode, multi_steps_attn_metadata)`. The positional arity check (>= 3)
  passed, so the wrapper bound the graph mode to the metadata parameter;
- a draft graph wrapper without `update_draft_model_metadata` (only `set_draft_attn_metadata_updates`, as
  vllm-ascend 6f1ce9b8's `ACLGraphWrapper`, acl_graph.py): the wrapped hook fell back to the stock method;
- an `AscendGemma4Proposer` with its own `_propose` (the per-group fork stored in the index as
  vllm_ascend/spec_decode/gemma4_proposer.py, file id 66347673367 — the index names neither its
  repository nor its commit; its module docstring says "the draft-loop methods that differ for Gemma4 are
  forked here", and its `_propose` calls `_update_full_graph_params_if_needed`, never
  `_maybe_update_metadata`): the wrapped hook was never reached.

Each is now refused, by `detect()` and so by `install()`, `apply()` and `check()`. The fakes reuse the
shapes of tests/unit/fixes/test_fixes_ascend.py (which say what each mirrors) and add only what is named above.
"""

from __future__ import annotations

import enum
import re
import types
from pathlib import Path
from typing import Any

import pytest
from test_fixes_ascend import (
    FakeGraphWrapper,
    acl_graph_module,
    fake_modules,
    flattening_base_proposer_module,
    gemma4_module,
    install_fake_package,
    run_draft_step,
    snapshot,
    two_group_steps,
)

from mtpbench.fixes import ascend_api, ascend_gemma4
from mtpbench.fixes.ascend_api import AscendModules, detect
from mtpbench.fixes.ascend_gemma4 import check, install
from mtpbench.fixes.layer_source import layer_resolved_update
from mtpbench.fixes.registry import apply_one
from mtpbench.patches.contract import PatchNotApplicable

REPO = Path(__file__).resolve().parents[3]
PATCH = "ascend-gemma4-layer-params"


def four_argument_base_module() -> types.ModuleType:
    """The hook of PR #15908's review diff (llm_base_proposer.py:633 there): graph mode before the list."""

    class AscendSpecDecodeBaseProposer:
        _runnable: Any

        def _maybe_update_metadata(
            self, att_backend: Any, aclgraph_runtime_mode: Any, multi_steps_attn_metadata: Any
        ) -> None:
            update_params = []
            for per_layer_metadata in multi_steps_attn_metadata:
                metadata = next(iter(per_layer_metadata.values()))
                update_params.append({"actual_seq_lengths_kv": metadata.seq_lens_list})
            self._runnable.update_draft_model_metadata(update_params)

        def _propose(self, att_backend: Any, mode: Any, multi_steps_attn_metadata: Any) -> None:
            self._maybe_update_metadata(att_backend, mode, multi_steps_attn_metadata)

    mod = types.ModuleType(ascend_api.BASE_PROPOSER)
    mod.AscendSpecDecodeBaseProposer = AscendSpecDecodeBaseProposer  # type: ignore[attr-defined]
    return mod


class CUDAGraphMode(enum.Enum):
    """The members of vllm.config.CUDAGraphMode the hook is called with (an enum: not iterable)."""

    NONE = 0
    FULL = 2


def with_base(base: types.ModuleType) -> AscendModules:
    ready = fake_modules()
    return AscendModules(ready.updatable_graph, base, gemma4_module(base), acl_graph_module())


# --- 1. the four-argument hook ----------------------------------------------------------------------


def test_the_wrapper_would_bind_the_graph_mode_to_the_metadata_of_a_four_argument_hook() -> None:
    # Why it must be refused: bound by position, the graph mode lands where the per-step list belongs.
    base = four_argument_base_module().AscendSpecDecodeBaseProposer
    wrapped = layer_resolved_update(base._maybe_update_metadata)
    proposer = base()
    proposer._runnable = FakeGraphWrapper(None, object)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wrapped(proposer, "backend", CUDAGraphMode.FULL, two_group_steps())  # list(CUDAGraphMode.FULL)


def test_a_four_argument_hook_is_refused_and_nothing_changes() -> None:
    modules = with_base(four_argument_base_module())
    found = detect(modules)
    assert not found.patchable
    assert "aclgraph_runtime_mode" in found.refusal and "\n" not in found.refusal
    before = snapshot(modules)
    with pytest.raises(PatchNotApplicable):
        install(modules)
    assert snapshot(modules) == before


def test_a_hook_taking_star_args_is_refused() -> None:
    base = flattening_base_proposer_module()

    def _maybe_update_metadata(self: Any, *args: Any) -> None:
        return None

    base.AscendSpecDecodeBaseProposer._maybe_update_metadata = _maybe_update_metadata  # type: ignore[attr-defined]
    assert "*args" in detect(with_base(base)).refusal


# --- 2. a graph wrapper without update_draft_model_metadata -----------------------------------------


class SetOnlyWrapper:
    """vllm_ascend/compilation/acl_graph.py @ 6f1ce9b8's ACLGraphWrapper as far as the hook is concerned: it
    takes draft params only through `set_draft_attn_metadata_updates(update_params)` (~:131, just after the
    `__init__` line :125 that raises), which `_updatable_graph_replay` wraps in `SharedSource`; the backend
    through `set_attn_backend`, as PR #15908's review diff calls it. No `update_draft_model_metadata`."""

    def set_draft_attn_metadata_updates(self, update_params: Any) -> None:
        self.update_params = update_params

    def set_attn_backend(self, backend: Any) -> None:
        self.backend = backend


def test_check_refuses_a_draft_wrapper_without_update_draft_model_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    modules = fake_modules()
    modules = AscendModules(
        modules.updatable_graph, modules.base_proposer, modules.gemma4_proposer, acl_graph_module(SetOnlyWrapper)
    )
    install_fake_package(monkeypatch, modules)
    ok, why = check()
    assert not ok
    assert why.startswith("fix not applied: the draft graph wrapper cannot take the per-layer source")
    assert "set_draft_attn_metadata_updates" in why and "reporting applied" in why
    before = snapshot(modules)
    outcome = apply_one(PATCH)
    assert outcome.status == "not-applicable" and snapshot(modules) == before


def test_a_build_whose_acl_graph_module_does_not_import_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    modules = fake_modules()
    install_fake_package(
        monkeypatch, AscendModules(modules.updatable_graph, modules.base_proposer, modules.gemma4_proposer, None)
    )
    ok, why = check()
    assert not ok and "acl_graph did not import" in why


# --- 3. AscendGemma4Proposer with its own _propose ----------------------------------------------------


def forked_gemma4_module(base_module: types.ModuleType, calls_hook: bool) -> types.ModuleType:
    """The per-group fork (index file id 66347673367, see the module docstring): `_propose` builds each
    group's metadata itself and updates the graph through `_update_full_graph_params_if_needed`."""
    mod = gemma4_module(base_module)
    cls = mod.AscendGemma4Proposer

    if calls_hook:

        def _propose(self: Any, attn_backend: Any, multi_steps_attn_metadata: Any) -> None:
            self._maybe_update_metadata(attn_backend, multi_steps_attn_metadata)

    else:

        def _propose(self: Any, attn_backend: Any, multi_steps_attn_metadata: Any) -> None:
            self._update_full_graph_params_if_needed(None, 0, multi_steps_attn_metadata)

    cls._propose = _propose
    return mod


def test_a_gemma4_proposer_with_its_own_draft_loop_is_refused_as_inert() -> None:
    base = flattening_base_proposer_module()
    modules = AscendModules(
        fake_modules().updatable_graph, base, forked_gemma4_module(base, calls_hook=False), acl_graph_module()
    )
    found = detect(modules)
    assert found.proposer.startswith(ascend_api.FORKED_PROPOSE)
    assert "AscendGemma4Proposer._propose" in found.refusal and "never reached" in found.refusal
    before = snapshot(modules)
    with pytest.raises(PatchNotApplicable):
        install(modules)
    assert snapshot(modules) == before


def test_an_own_propose_that_calls_the_hook_is_accepted() -> None:
    base = flattening_base_proposer_module()
    modules = AscendModules(
        fake_modules().updatable_graph, base, forked_gemma4_module(base, calls_hook=True), acl_graph_module()
    )
    assert detect(modules).patchable and detect(modules).proposer == "stock"


def test_a_base_proposer_without_propose_is_not_assumed_to_reach_the_hook() -> None:
    base = flattening_base_proposer_module()
    del base.AscendSpecDecodeBaseProposer._propose
    assert "no _propose" in detect(with_base(base)).refusal


# --- the hook's counters: evidence that it ran -------------------------------------------------------


def test_observations_count_the_hook_and_the_per_layer_updates() -> None:
    modules = fake_modules()
    install(modules)
    before = ascend_gemma4.observations()
    run_draft_step(modules, two_group_steps())
    after = ascend_gemma4.observations()
    assert after["hook_calls"] - before["hook_calls"] == 1
    assert after["layer_resolved_updates"] - before["layer_resolved_updates"] == 1


# --- wording ------------------------------------------------------------------------------------------


def test_docs_do_not_call_pr_16737s_shape_the_upstream_fix() -> None:
    text = (REPO / "docs" / "ascend.md").read_text() + (REPO / "README.md").read_text()
    for source in (ascend_api, ascend_gemma4):
        text += source.__doc__ or ""
    lowered = " ".join(text.lower().split())
    claims = [m.start() for m in re.finditer("upstream fix", lowered)]
    # Only the denial may name it: "not the upstream fix" / "not an upstream fix".
    assert all(lowered[:at].endswith(("not the ", "not an ")) for at in claims), claims
    ascend = (REPO / "docs" / "ascend.md").read_text()
    assert "#16737" in ascend and "closed without being merged" in ascend
    assert "maintainers' shape" in ascend
