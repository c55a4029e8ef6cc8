"""The `ascend-gemma4-layer-params` patch: per-layer draft graph parameters for Gemma4 MTP on vllm-ascend.

The bug: in graph mode (FULL_DECODE_ONLY) the draft graph's replay parameters are built per draft step
from one representative layer, so Gemma4's draft layers — split over a sliding-attention and a
full-attention KV-cache group — all read one group's block table, and which group depends on set
iteration order (PYTHONHASHSEED). The fix resolves them per layer (see `layer_source`).

`apply()` (registered in the registry, fixes/registry.py) imports the vllm-ascend modules, lets
`ascend_api.detect` classify them, and only on the recognised flattening shape (two-argument
`_maybe_update_metadata` reached from the base `_propose`, a graph wrapper with
`update_draft_model_metadata`, the sequence `SharedSource`) installs two hooks:
`SharedSource.get` delegates to a param source when one is supplied, and
`AscendGemma4Proposer._maybe_update_metadata` supplies a `LayerResolvedSource`. Only the Gemma4 proposer
is changed: other proposers keep the stock behaviour. Any other shape raises `PatchNotApplicable` with
the reason (prefixed "fix not applied") and changes nothing; a second `apply()` in the same process is a
no-op. `check()` answers what `apply()` would do without changing anything (for `run --dry-run`).
`observations()` says, after the prompts, how often the installed hook ran and how often it handed a
per-layer source to the graph wrapper: an `applied` fix whose hook was never reached shows 0 there.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib import metadata
from types import ModuleType

from mtpbench.fixes.ascend_api import (
    ACL_GRAPH,
    BASE_PROPOSER,
    GEMMA4_PROPOSER,
    PATCHED,
    UPDATABLE_GRAPH,
    AscendModules,
    detect,
)
from mtpbench.fixes.layer_source import PATCH_NAME, delegating_shared_get, hook_counts, layer_resolved_update
from mtpbench.patches.contract import PatchNotApplicable

Importer = Callable[[str], ModuleType]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _vllm_ascend_version() -> str:
    for dist in ("vllm-ascend", "vllm_ascend"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown version"


def load_modules(import_module: Importer = importlib.import_module) -> AscendModules:
    """Import what the fix touches; any failure becomes a one-line `PatchNotApplicable`."""
    try:
        import_module("vllm_ascend")
    except Exception as exc:  # vllm_ascend raises more than ImportError without torch_npu
        raise PatchNotApplicable(f"vllm_ascend is not importable here ({_first_line(exc)})") from None
    try:
        updatable_graph = import_module(UPDATABLE_GRAPH)
    except ModuleNotFoundError as exc:
        if exc.name == UPDATABLE_GRAPH:
            raise PatchNotApplicable(
                f"this vllm-ascend has no {UPDATABLE_GRAPH} module (in the builds read, draft params go "
                "through update_full_graph_params there); the patch targets UpdatableGraph/SharedSource"
            ) from None
        raise PatchNotApplicable(f"cannot import {UPDATABLE_GRAPH} ({_first_line(exc)})") from None
    except Exception as exc:
        raise PatchNotApplicable(f"cannot import {UPDATABLE_GRAPH} ({_first_line(exc)})") from None
    try:
        base_proposer = import_module(BASE_PROPOSER)
    except Exception as exc:
        raise PatchNotApplicable(f"cannot import {BASE_PROPOSER} ({_first_line(exc)})") from None
    try:
        gemma4_proposer = import_module(GEMMA4_PROPOSER)
    except ModuleNotFoundError as exc:
        if exc.name == GEMMA4_PROPOSER:
            raise PatchNotApplicable(f"this vllm-ascend has no Gemma4 proposer ({GEMMA4_PROPOSER})") from None
        raise PatchNotApplicable(f"cannot import {GEMMA4_PROPOSER} ({_first_line(exc)})") from None
    except Exception as exc:
        raise PatchNotApplicable(f"cannot import {GEMMA4_PROPOSER} ({_first_line(exc)})") from None
    try:
        acl_graph = import_module(ACL_GRAPH)
    except Exception:  # detect() refuses an unknown wrapper, after the more specific reasons
        acl_graph = None
    return AscendModules(updatable_graph, base_proposer, gemma4_proposer, acl_graph)


def install(modules: AscendModules, version: str = "") -> str:
    """Install the fix into `modules` if their shape is the flattening one; return what changed."""
    found = detect(modules)
    where = f" (vllm-ascend {version})" if version else ""
    if found.installed:
        return f"{PATCH_NAME} already installed in this process{where}; nothing changed"
    if not found.patchable:
        raise PatchNotApplicable(found.refusal)
    shared_source = modules.updatable_graph.SharedSource
    gemma4 = modules.gemma4_proposer.AscendGemma4Proposer
    # Both wrappers are built before either is assigned, so a failure leaves the build untouched.
    new_get = None if found.shared_source == PATCHED else delegating_shared_get(shared_source.get)
    new_update = None if found.proposer == PATCHED else layer_resolved_update(gemma4._maybe_update_metadata)
    if new_get is not None:
        shared_source.get = new_get
    if new_update is not None:
        # Set on the Gemma4 subclass only: the base proposer and every other drafter stay stock.
        gemma4._maybe_update_metadata = new_update
    return (
        f"AscendGemma4Proposer._maybe_update_metadata now supplies a per-layer param source and "
        f"SharedSource.get delegates to it (API shape {found.shared_source}){where}"
    )


# Every refusal starts with this, so the cell's fingerprint, the vLLM plugin's log line and the verdict
# all say in the same words that the `fixed` variant measured the unfixed code.
NOT_APPLIED = "fix not applied"


def apply() -> str:
    """Registry entry point: patch the vllm_ascend importable in this process (see module docstring)."""
    try:
        modules = load_modules()
        return install(modules, _vllm_ascend_version())
    except PatchNotApplicable as exc:
        raise PatchNotApplicable(f"{NOT_APPLIED}: {exc}") from None


def check() -> tuple[bool, str]:
    """What `apply()` would do here, changing nothing: (would apply, one-line reason). For `--dry-run`."""
    try:
        modules = load_modules()
    except PatchNotApplicable as exc:
        return False, f"{NOT_APPLIED}: {exc}"
    found = detect(modules)
    if found.installed or found.patchable:
        return (
            True,
            f"would install the per-layer param source (SharedSource {found.shared_source}, "
            f"AscendGemma4Proposer {found.proposer})",
        )
    return False, f"{NOT_APPLIED}: {found.refusal}"


def observations() -> dict[str, int]:
    """The installed hook's counters in this process (read by the worker after the prompts)."""
    return hook_counts()
