"""The `ascend-gemma4-layer-params` fix against the vllm-ascend shape of commit 6f1ce9b8, and what a run
says when a fix did not apply.

vllm-project/vllm-ascend @ 6f1ce9b84f9ec1bdac4df486041e2074d6ff0eed has UpdatableGraph and the flattening
bug, but not the `_maybe_update_metadata` hook the fix wraps: its draft params come from
`_build_draft_attn_metadata_updates` through `ACLGraphWrapper.set_draft_attn_metadata_updates`, and the
draft steps >= 1 are bound to one KV-cache group inside `_propose` itself. The installer refuses it with a
reason naming exactly that (never "pre-UpdatableGraph"), and changes nothing. These tests pin the refusal,
reproduce the bug on a fake of that commit's code, show why a param source alone would not fix it (so the
refusal is right), and check that the run's verdict, its summary headline and `run --dry-run` say
"fix not applied".

Regression guarded: issue 9 — the README claimed this shape was patched while the installer refused it as
"pre-UpdatableGraph", so the `fixed` cells silently measured the stock build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from test_fixes_ascend import install_fake_package

from mtpbench.fixes import ascend_api
from mtpbench.fixes.ascend_api import AscendModules, detect
from mtpbench.fixes.ascend_gemma4 import install
from mtpbench.fixes.layer_source import LayerResolvedSource
from mtpbench.fixes.registry import apply_one
from mtpbench.fixes.status import FIX_NOT_APPLIED, headline, preflight, unapplied
from mtpbench.patches.contract import PatchNotApplicable
from mtpbench.render.words import finding_message

REPO = Path(__file__).resolve().parents[3]
PATCH = "ascend-gemma4-layer-params"
COMMIT = "6f1ce9b84f9ec1bdac4df486041e2074d6ff0eed"

# Gemma4 MTP's draft: layers 0-2 read a sliding-attention KV-cache group, layer 3 a full-attention one.
SLIDING = ("draft.attn.0", "draft.attn.1", "draft.attn.2")
FULL = ("draft.attn.3",)
K = 3


# ---------------------------------------------------------------------------------------------------
# Fakes of vllm-project/vllm-ascend @ 6f1ce9b8 — they mirror the implementation (not the unit tests).
# Line numbers of updatable_graph.py were counted on the stored text of that commit; those of
# llm_base_proposer.py are the ones issue 9 gives and match the methods read there.
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Meta:
    """The fields of AscendMetadata that llm_base_proposer.py @ 6f1ce9b8 reads for draft params (:610-617)
    plus the block table the captured kernel was bound to. Values are tagged with the KV-cache group."""

    actual_seq_lengths_q: tuple[int, ...]
    seq_lens_list: tuple[str, ...]
    block_tables: str


@dataclass(frozen=True)
class Provider:
    """An attention task's provider, keyed by layer (FIAParamProvider(self._layer_name) in the UpdatableGraph
    PRs' attention_v1.py; attention_v1.py @ 6f1ce9b8 itself was not read). `resolve` returns the keys
    `_build_draft_attn_metadata_updates` builds at 6f1ce9b8 (:612-616): no block_table."""

    layer_name: str

    def resolve(self, per_layer_metadata: Any) -> dict[str, Any]:
        m = per_layer_metadata[self.layer_name]
        return {"actual_seq_lengths": m.actual_seq_lengths_q, "actual_seq_lengths_kv": m.seq_lens_list}


@dataclass(frozen=True, slots=True)
class SharedSource:
    """updatable_graph.py @ 6f1ce9b8 :38-46: `get(_provider) -> self.params`, one list for every provider."""

    params: Any

    def get(self, _provider: Any) -> Any:
        return self.params


class UpdatableGraph:
    """updatable_graph.py @ 6f1ce9b8 :72-137, device calls left out. `register_task` (:103-128) numbers a
    provider's tasks in capture order (`provider_index`); `resolve_tasks` (:130-137) asks the source once
    per provider, asserts one params dict per task, and binds `{**kwargs, **params}` (GraphUpdateTask.bind,
    :61-63)."""

    def __init__(self) -> None:
        self.tasks: list[tuple[dict[str, Any], Provider, int]] = []
        self.provider_sizes: dict[Provider, int] = {}

    def register_task(self, kwargs: dict[str, Any], provider: Provider) -> None:
        index = self.provider_sizes.get(provider, 0)
        self.provider_sizes[provider] = index + 1
        self.tasks.append((kwargs, provider, index))

    def resolve_tasks(self, source: Any) -> list[dict[str, Any]]:
        by_provider = {p: source.get(p) for p in self.provider_sizes}
        for p, size in self.provider_sizes.items():
            assert len(by_provider[p]) == size
        return [{**kw, **by_provider[p][i], "layer": p.layer_name, "step": i} for kw, p, i in self.tasks]


class ACLGraphWrapper:
    """acl_graph.py @ 6f1ce9b8, the draft path: `set_draft_attn_metadata_updates(update_params)` stores the
    list; `_updatable_graph_replay` resolves a draft graph with `SharedSource(self.draft_attn_metadata_updates)`.
    Upstream `__init__` raises TypeError there (:125, `self.draft_attn_metadata_updates = list[...] = []`);
    the fake takes the evident intent, an empty list, so the bug behind it can be looked at."""

    def __init__(self) -> None:
        self.draft_attn_metadata_updates: list[dict[str, Any]] = []
        self.graph = UpdatableGraph()

    def set_draft_attn_metadata_updates(self, update_params: list[dict[str, Any]]) -> None:
        self.draft_attn_metadata_updates = update_params

    def capture(self, multi_steps_attn_metadata: list[dict[str, Meta]]) -> None:
        # Capture registers one task per draft layer per step, the kwargs being what that layer's kernel
        # was fed at capture time (its block table is baked into the graph: not an updatable param here).
        for step in multi_steps_attn_metadata:
            for name in (*SLIDING, *FULL):
                self.graph.register_task({"captured_block_table": step[name].block_tables}, Provider(name))

    def replay_draft(self) -> list[dict[str, Any]]:
        return self.graph.resolve_tasks(SharedSource(self.draft_attn_metadata_updates))


@dataclass(frozen=True)
class AttnGroup:
    """A draft attention group (one per KV-cache group): its layers and what its builder produces."""

    name: str
    layer_names: tuple[str, ...]

    def build(self, step: int) -> Meta:
        return Meta((step + 1,), (f"{self.name}-seqlens@{step}",), f"{self.name}-blocks@{step}")


class AscendSpecDecodeBaseProposer:
    """llm_base_proposer.py @ 6f1ce9b8, the parts that decide the draft graph's params:

    - `attn_layer_names = sorted(draft layers)` (load_model);
    - `build_draft_attn_metadata` (step 0): each group's metadata for that group's `layer_names`;
    - `_propose`, draft steps >= 1 (:1116-1128): for every group in `draft_attn_groups`, *every* name in
      `attn_layer_names` is set to that group's metadata, so the last group wins for all layers;
      then, in FULL graph mode outside capture (:1133-1137), `_build_draft_attn_metadata_updates` and
      `self._runnable.set_draft_attn_metadata_updates(update_params)`;
    - `dummy_run` (:715, :737-775, :801-803): every step's metadata is built with the first group's
      builder and `block_table[self.kv_cache_gid]`, and set for every name in `attn_layer_names`;
    - `_build_draft_attn_metadata_updates` (:606-617): `next(iter(per_layer_metadata.values()))` per step.
    No `_maybe_update_metadata`.
    """

    def __init__(self, groups: list[AttnGroup]) -> None:
        self.draft_attn_groups = groups
        self.attn_layer_names = sorted(n for g in groups for n in g.layer_names)
        self.num_speculative_tokens = K
        self._runnable: Any = ACLGraphWrapper()

    def _build_draft_attn_metadata_updates(self, multi_steps_attn_metadata: list[dict[str, Meta]]) -> list:
        update_params = []
        for per_layer_metadata in multi_steps_attn_metadata:
            metadata = next(iter(per_layer_metadata.values()))
            update_params.append(
                {"actual_seq_lengths": metadata.actual_seq_lengths_q, "actual_seq_lengths_kv": metadata.seq_lens_list}
            )
        return update_params

    def build_draft_attn_metadata(self) -> list[dict[str, Meta]]:
        per_layer: dict[str, Meta] = {}
        for group in self.draft_attn_groups:
            metadata = group.build(0)
            for name in group.layer_names:
                per_layer[name] = metadata
        return [per_layer]

    def _propose(self, full_graph: bool = True) -> list[dict[str, Meta]]:
        multi_steps = self.build_draft_attn_metadata()
        for draft_index in range(1, self.num_speculative_tokens):
            per_layer: dict[str, Meta] = {}
            for group in self.draft_attn_groups:
                metadata = group.build(draft_index)
                for name in self.attn_layer_names:
                    per_layer[name] = metadata
            multi_steps.append(per_layer)
        if full_graph:
            self._runnable.set_draft_attn_metadata_updates(self._build_draft_attn_metadata_updates(multi_steps))
        return multi_steps

    def dummy_run(self, capturing: bool) -> list[dict[str, Meta]]:
        group = self.draft_attn_groups[0]
        multi_steps = [{name: group.build(i) for name in self.attn_layer_names} for i in range(K)]
        if not capturing:
            self._runnable.set_draft_attn_metadata_updates(self._build_draft_attn_metadata_updates(multi_steps))
        return multi_steps


class AscendGemma4Proposer(AscendSpecDecodeBaseProposer):
    """gemma4_proposer.py is not stored at 6f1ce9b8; a subclass that keeps the base's draft-param path is
    the most it can be assumed to be (issue 9 stubbed it the same way)."""


def groups(full_first: bool) -> list[AttnGroup]:
    """`draft_attn_groups` in one of the two orders a different set/dict order can give."""
    g = [AttnGroup("sliding", SLIDING), AttnGroup("full", FULL)]
    return g[::-1] if full_first else g


def modules_6f1ce9b8() -> AscendModules:
    ug = types.ModuleType(ascend_api.UPDATABLE_GRAPH)
    ug.SharedSource = SharedSource  # type: ignore[attr-defined]
    ug.UpdatableGraph = UpdatableGraph  # type: ignore[attr-defined]
    base = types.ModuleType(ascend_api.BASE_PROPOSER)
    base.AscendSpecDecodeBaseProposer = AscendSpecDecodeBaseProposer  # type: ignore[attr-defined]
    gemma4 = types.ModuleType(ascend_api.GEMMA4_PROPOSER)
    gemma4.AscendGemma4Proposer = AscendGemma4Proposer  # type: ignore[attr-defined]
    return AscendModules(ug, base, gemma4)


def snapshot(modules: AscendModules) -> tuple[Any, ...]:
    return (
        dict(vars(modules.updatable_graph.SharedSource)),
        dict(vars(modules.base_proposer.AscendSpecDecodeBaseProposer)),
        dict(vars(modules.gemma4_proposer.AscendGemma4Proposer)),
    )


def graph_step(full_first: bool) -> list[dict[str, Any]]:
    """Capture (dummy_run), then one real draft step (_propose) and its replay, as the engine orders them."""
    proposer = AscendGemma4Proposer(groups(full_first))
    proposer._runnable.capture(proposer.dummy_run(capturing=True))
    proposer._propose(full_graph=True)
    return proposer._runnable.replay_draft()


# ---------------------------------------------------------------------------------------------------
# The bug, on the fake of 6f1ce9b8
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("full_first", [False, True], ids=["sliding-first", "full-first"])
def test_6f1ce9b8_binds_one_layers_seq_lengths_to_every_draft_layer(full_first: bool) -> None:
    bound = graph_step(full_first)
    for step in range(K):
        at_step = {t["actual_seq_lengths_kv"] for t in bound if t["step"] == step}
        assert len(at_step) == 1, at_step  # every layer of the step got the representative's lengths
    # The captured block tables are the first group's for every layer (dummy_run: one builder, one gid).
    first = groups(full_first)[0].name
    assert {t["captured_block_table"].split("-")[0] for t in bound} == {first}


def test_6f1ce9b8_step_one_metadata_is_already_one_groups_before_any_source_sees_it() -> None:
    # Why the patch is refused rather than half-applied: a layer-resolved source only re-reads the
    # per-layer metadata, and at steps >= 1 _propose has already given every layer the last group's.
    for full_first in (False, True):
        steps = AscendGemma4Proposer(groups(full_first))._propose(full_graph=False)
        last = groups(full_first)[-1].name
        source = LayerResolvedSource(steps)
        for name in (*SLIDING, *FULL):
            got = source.get(Provider(name))
            assert all(str(p["actual_seq_lengths_kv"][0]).startswith(last) for p in got[1:]), (name, got)
        # Step 0 is per group (build_draft_attn_metadata), so only the steps >= 1 are wrong.
        assert source.get(Provider("draft.attn.0"))[0]["actual_seq_lengths_kv"] == ("sliding-seqlens@0",)


# ---------------------------------------------------------------------------------------------------
# Detection and installer on 6f1ce9b8
# ---------------------------------------------------------------------------------------------------


def test_detection_names_what_6f1ce9b8_has() -> None:
    found = detect(modules_6f1ce9b8())
    assert found.shared_source == ascend_api.SEQUENCE
    assert found.proposer == ascend_api.DRAFT_UPDATES
    assert not found.patchable
    for fact in (
        "UpdatableGraph present",
        "_build_draft_attn_metadata_updates",
        "no _maybe_update_metadata",
        "set_draft_attn_metadata_updates",
        "_propose",
    ):
        assert fact in found.refusal, fact
    assert "pre-UpdatableGraph" not in found.refusal and "predates" not in found.refusal
    assert "\n" not in found.refusal


def test_install_refuses_6f1ce9b8_and_changes_nothing() -> None:
    modules = modules_6f1ce9b8()
    before = snapshot(modules)
    with pytest.raises(PatchNotApplicable, match="_build_draft_attn_metadata_updates"):
        install(modules)
    assert snapshot(modules) == before
    # And the build still shows the bug: nothing was half-installed.
    assert len({t["actual_seq_lengths_kv"] for t in graph_step(False) if t["step"] == 1}) == 1


def test_a_proposer_without_either_hook_is_described_not_dated() -> None:
    modules = modules_6f1ce9b8()

    class Bare:
        pass

    modules.base_proposer.AscendSpecDecodeBaseProposer = Bare
    found = detect(modules)
    assert "neither _maybe_update_metadata nor _build_draft_attn_metadata_updates" in found.refusal
    assert "pre-UpdatableGraph" not in found.refusal


def test_the_cells_fingerprint_says_fix_not_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    # apply_one's outcome is what the worker writes into the cell_start record (the fingerprint).
    install_fake_package(monkeypatch, modules_6f1ce9b8())
    outcome = apply_one(PATCH)
    assert outcome.status == "not-applicable"
    assert outcome.detail.startswith("fix not applied: ")
    assert "UpdatableGraph present" in outcome.detail


# ---------------------------------------------------------------------------------------------------
# What a run says about it: findings, the verdict, the summary headline, the dry run
# ---------------------------------------------------------------------------------------------------


REFUSED = {"name": PATCH, "status": "not-applicable", "detail": "fix not applied: this vllm-ascend has X"}
APPLIED = {"name": PATCH, "status": "applied", "detail": "AscendGemma4Proposer._maybe_update_metadata now …"}


def _starts(fixed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [{"cell": "b/FULL_DECODE_ONLY/stock", "repeat": r, "variant": "stock", "patches": []} for r in range(2)]
    out += [
        {"cell": "b/FULL_DECODE_ONLY/fixed", "repeat": r, "variant": "fixed", "patches": [p]}
        for r, p in enumerate(fixed)
    ]
    return out


def test_findings_and_headline_when_every_fixed_cell_went_unapplied() -> None:
    starts = _starts([REFUSED, REFUSED])
    (u,) = unapplied(starts)
    assert (u.cell, u.kind, u.severity, u.repeats, u.of) == ("b/FULL_DECODE_ONLY/fixed", FIX_NOT_APPLIED, "warn", 2, 2)
    assert "fix not applied in 2 of 2 repeats" in u.message and "this vllm-ascend has X" in u.message
    top = headline(starts)
    assert top is not None and top.startswith("FIX NOT APPLIED")
    assert "in none of the 1 cell(s)" in top


def test_partly_applied_and_failed_fixes() -> None:
    failed = {"name": PATCH, "status": "failed", "detail": "RuntimeError: boom"}
    (u,) = unapplied(_starts([APPLIED, failed]))
    assert (u.repeats, u.of, u.status, u.severity) == (1, 2, "failed", "fail")
    top = headline(_starts([APPLIED, failed]))
    assert top is not None and "in 1 of the 1 cell(s)" in top
    assert unapplied(_starts([APPLIED, APPLIED])) == [] and headline(_starts([APPLIED, APPLIED])) is None


def test_a_fault_patch_that_did_not_apply_is_not_called_a_fix() -> None:
    starts = [
        {
            "cell": "c/m/fault",
            "repeat": 0,
            "patches": [{"name": "flatten-draft-metadata", "status": "not-applicable", "detail": "no Gemma4Proposer"}],
        }
    ]
    (u,) = unapplied(starts)
    assert u.kind == "patch-not-applied" and "patch not applied" in u.message
    assert headline(starts) is None


def _run_with_unapplied_fix(make_run: Callable[..., Path], outcome: dict[str, Any] = REFUSED) -> Path:
    rates = [[98.2, 96.3, 89.9]] * 2
    path = make_run({"b/FULL_DECODE_ONLY/stock": rates, "b/FULL_DECODE_ONLY/fixed": rates})
    records = path / "records.jsonl"
    lines = [json.loads(x) for x in records.read_text().splitlines()]
    for rec in lines:
        if rec["type"] == "cell_start" and rec["variant"] == "fixed":
            rec["patches"] = [outcome]
    records.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_verdict_diagnoses_fix_not_applied(make_run: Callable[..., Path]) -> None:
    from mtpbench.judge.compare import judge
    from mtpbench.store.results import load_run

    comp = judge(load_run(_run_with_unapplied_fix(make_run)))
    # A typed finding (findings.PatchNotApplied), worded by words.finding_message.
    (d,) = [d for d in comp.diagnoses if d.name == FIX_NOT_APPLIED]
    assert d.cell == "b/FULL_DECODE_ONLY/fixed" and d.severity == "warn"
    assert "fix not applied" in finding_message(d)
    assert int(comp.exit_code) == 0  # a refusal warns; a patch that raised would fail the gate


def test_run_summary_says_fix_not_applied_at_the_top(
    make_run: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from mtpbench.cli import run_cmd

    run_cmd.verdict(_run_with_unapplied_fix(make_run), None, None, run_failed=False)
    out = capsys.readouterr().out
    assert out.lstrip().startswith("FIX NOT APPLIED"), out[:300]
    assert "fix-not-applied" in out


# The fake vllm_ascend package of 6f1ce9b8's shape, as files, for a probe in a fresh interpreter. It
# holds only what the installer inspects (same facts as the fakes above).
_FAKE_PACKAGE = {
    "vllm_ascend/__init__.py": "",
    "vllm_ascend/compilation/__init__.py": "",
    "vllm_ascend/compilation/updatable_graph.py": """
        from dataclasses import dataclass
        from typing import Any

        @dataclass(frozen=True, slots=True)
        class SharedSource:  # updatable_graph.py @ 6f1ce9b8 :38-46
            params: Any

            def get(self, _provider):
                return self.params

        class UpdatableGraph:  # :72; the device side is irrelevant to the installer
            pass
    """,
    "vllm_ascend/spec_decode/__init__.py": "",
    "vllm_ascend/spec_decode/llm_base_proposer.py": """
        class AscendSpecDecodeBaseProposer:  # llm_base_proposer.py @ 6f1ce9b8
            def _build_draft_attn_metadata_updates(self, multi_steps_attn_metadata):  # :606-617
                out = []
                for per_layer_metadata in multi_steps_attn_metadata:
                    m = next(iter(per_layer_metadata.values()))
                    out.append({"actual_seq_lengths": m.actual_seq_lengths_q,
                                "actual_seq_lengths_kv": m.seq_lens_list})
                return out
    """,
    "vllm_ascend/spec_decode/gemma4_proposer.py": """
        from vllm_ascend.spec_decode.llm_base_proposer import AscendSpecDecodeBaseProposer

        class AscendGemma4Proposer(AscendSpecDecodeBaseProposer):
            pass
    """,
}


@pytest.fixture
def fake_6f1ce9b8_path(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    for rel, text in _FAKE_PACKAGE.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))
    return root


@dataclass(frozen=True)
class _Cell:
    build: str


@dataclass(frozen=True)
class _Plan:
    cell: _Cell
    python: str
    env: dict[str, str]
    job: dict[str, Any]


def test_preflight_asks_the_builds_interpreter(fake_6f1ce9b8_path: Path) -> None:
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(fake_6f1ce9b8_path)])}
    plan = _Plan(_Cell("ascend-6f1ce9b8"), sys.executable, env, {"patches": [PATCH]})
    (pf,) = preflight([plan, replace(plan, job={"patches": [PATCH]})])  # one probe per build and patch
    assert pf.applies is False
    assert pf.line.startswith("FIX NOT APPLIED on build ascend-6f1ce9b8")
    assert "_build_draft_attn_metadata_updates" in pf.line and "UpdatableGraph present" in pf.line


def test_dry_run_of_the_ascend_config_makes_an_unapplied_fix_impossible_to_miss(
    fake_6f1ce9b8_path: Path, tmp_path: Path
) -> None:
    import yaml

    cfg = yaml.safe_load((REPO / "configs" / "gemma4-mtp-ascend.yaml").read_text())
    cfg["builds"] = {"vllm-ascend": {"python": None, "env": {"PYTHONPATH": str(fake_6f1ce9b8_path)}}}
    cfg["prompts"] = str(REPO / "prompts" / "coding.yaml")
    cfg["baseline"] = str(REPO / "baselines" / "gemma4-mtp-v0.26.0rc1.yaml")
    path = tmp_path / "ascend.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": str(REPO), "MTPBENCH_WIDTH": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "mtpbench", "run", str(path), "--dry-run", "--out", str(tmp_path / "runs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    # First and last word of the listing (before the sizing and the estimate) both say it.
    assert lines[0].startswith("FIX NOT APPLIED on build vllm-ascend: ascend-gemma4-layer-params")
    end = next(i for i, x in enumerate(lines) if x.startswith("dry run: nothing was started"))
    assert [x for x in lines[:end] if x.strip()][-1].startswith("FIX NOT APPLIED")
    assert "_build_draft_attn_metadata_updates" in lines[0]


def test_preflight_skips_patches_without_a_check() -> None:
    plan = _Plan(_Cell("cpu"), "/nonexistent/python", {}, {"patches": ["flatten-draft-metadata", "nope"]})
    assert preflight([plan]) == []  # no probe started: the interpreter path would not even exist


def test_a_fix_that_raised_fails_the_gate(make_run: Callable[..., Path]) -> None:
    from mtpbench.judge.compare import judge
    from mtpbench.store.results import load_run

    failed = {"name": PATCH, "status": "failed", "detail": "RuntimeError: boom"}
    comp = judge(load_run(_run_with_unapplied_fix(make_run, failed)))
    (d,) = [d for d in comp.diagnoses if d.name == FIX_NOT_APPLIED]
    assert d.severity == "fail" and "RuntimeError: boom" in finding_message(d)
    assert int(comp.exit_code) == 1
