"""Recognises which shape of vllm-ascend's draft-graph parameter API a build has (pure logic, stdlib only).

The per-layer fix only makes sense against one shape of the API, so the installer first classifies the
three modules it touches — `vllm_ascend.compilation.updatable_graph` (`SharedSource`),
`vllm_ascend.spec_decode.llm_base_proposer` (`AscendSpecDecodeBaseProposer._maybe_update_metadata`) and
`vllm_ascend.spec_decode.gemma4_proposer` (`AscendGemma4Proposer`). `SharedSource` is classified by
*behaviour*, calling its `get` on small probe objects (it is a plain dataclass, no device needed), so a
reformatted or renamed implementation is still recognised by what it does. Shapes found in vllm-ascend
and its forks (the README's Ascend shapes table names the commits):

- `shared-source-sequence`: `get(provider) -> self.params`, the same per-step list for every provider.
  The flattening shape. The fix applies when the proposer hands its per-step list over through a
  `_maybe_update_metadata(attn_backend, multi_steps_attn_metadata)` hook (the shape vllm-ascend's unit
  tests describe); it is refused when the list comes from `_build_draft_attn_metadata_updates` through
  `ACLGraphWrapper.set_draft_attn_metadata_updates` (vllm-ascend 6f1ce9b8, `DRAFT_UPDATES` below): there
  the draft steps >= 1 are already bound to one KV-cache group inside `_propose`, before any param
  source could resolve them per layer, so delegating `SharedSource.get` alone would not fix the bug.
- `shared-source-layer-tagged`: params carry `layer_name` and `get` keeps the provider's own entries.
  Already resolves per layer; nothing to do.
- `shared-source-delegating`: `SharedSource` already forwards to a `ParamSource` (the upstream fix).
- `shared-source-indexed`: `get(provider, index) -> params` (one entry per task). Not recognised.
- legacy: no `updatable_graph` module; draft params go through `update_full_graph_params`. Not targeted.

`detect()` takes the modules as arguments, so tests hand it small fake modules mimicking each shape.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mtpbench.fixes.layer_source import is_marked

UPDATABLE_GRAPH = "vllm_ascend.compilation.updatable_graph"
BASE_PROPOSER = "vllm_ascend.spec_decode.llm_base_proposer"
GEMMA4_PROPOSER = "vllm_ascend.spec_decode.gemma4_proposer"

SEQUENCE = "shared-source-sequence"
LAYER_TAGGED = "shared-source-layer-tagged"
DELEGATING = "shared-source-delegating"
INDEXED = "shared-source-indexed"
PATCHED = "patched"
# Proposer shape of vllm-ascend 6f1ce9b8: no `_maybe_update_metadata`; the draft params are built by
# `_build_draft_attn_metadata_updates` (one representative layer per step) and handed to the graph wrapper
# with `set_draft_attn_metadata_updates`, from `_propose` and `dummy_run`.
DRAFT_UPDATES = "draft-attn-metadata-updates"


@dataclass(frozen=True)
class AscendModules:
    """The three vllm-ascend modules the fix touches (real modules, or fakes in tests)."""

    updatable_graph: Any
    base_proposer: Any
    gemma4_proposer: Any


@dataclass(frozen=True)
class Detection:
    shared_source: str  # one of the shape names above, or "unknown: <why>"
    proposer: str  # "stock" | "patched" | "overridden" | DRAFT_UPDATES | "unknown: <why>"
    # Empty when the fix can be installed (or is installed already); otherwise the one-line reason.
    refusal: str = ""

    @property
    def installed(self) -> bool:
        return self.shared_source == PATCHED and self.proposer == PATCHED

    @property
    def patchable(self) -> bool:
        return not self.refusal


class _ProbeProvider:
    __slots__ = ("layer_name",)

    def __init__(self, layer_name: str) -> None:
        self.layer_name = layer_name

    def resolve(self, context: Any) -> dict[str, Any]:
        return {"probe": context}


class _ProbeSource:
    __slots__ = ("answer",)

    def __init__(self) -> None:
        self.answer: list[dict[str, Any]] = [{"probe": "delegated"}]

    def get(self, provider: Any) -> list[dict[str, Any]]:
        return self.answer


def _positional_arity(func: Any) -> int | None:
    """Number of positional parameters (self included), or None when *args makes it open-ended."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def classify_shared_source(shared_source: Any) -> str:
    get = getattr(shared_source, "get", None)
    if get is None:
        return "unknown: SharedSource has no get()"
    if is_marked(get):
        return PATCHED
    arity = _positional_arity(get)
    if arity == 3:
        return INDEXED
    if arity is not None and arity != 2:
        return f"unknown: SharedSource.get takes {arity} positional parameters"
    try:
        delegate = _ProbeSource()
        if shared_source(delegate).get(_ProbeProvider("probe.a")) is delegate.answer:
            return DELEGATING
    except Exception:  # a stock get() may iterate or index the probe; that is not delegation
        pass
    tagged = [{"layer_name": "probe.a", "v": 0}, {"layer_name": "probe.b", "v": 1}]
    try:
        got = shared_source(tagged).get(_ProbeProvider("probe.b"))
    except Exception as exc:  # any failure means: not a shape we know
        return f"unknown: SharedSource probe raised {type(exc).__name__}: {exc}"
    if isinstance(got, Sequence) and list(got) == tagged:
        return SEQUENCE
    if isinstance(got, Sequence) and list(got) == [{"v": 1}]:
        return LAYER_TAGGED
    return "unknown: SharedSource.get returned neither the shared list nor the provider's own entries"


def classify_proposer(base_module: Any, gemma4_module: Any) -> str:
    base = getattr(base_module, "AscendSpecDecodeBaseProposer", None)
    if base is None:
        return "unknown: no AscendSpecDecodeBaseProposer"
    hook = getattr(base, "_maybe_update_metadata", None)
    if hook is None:
        if callable(getattr(base, "_build_draft_attn_metadata_updates", None)):
            return DRAFT_UPDATES
        # Say what is missing, not which era the build is from: a build can have UpdatableGraph and still
        # lack this hook (vllm-ascend 6f1ce9b8 does).
        return (
            "unknown: AscendSpecDecodeBaseProposer has neither _maybe_update_metadata nor "
            "_build_draft_attn_metadata_updates"
        )
    arity = _positional_arity(hook)
    if arity is not None and arity < 3:
        return f"unknown: _maybe_update_metadata takes {arity} positional parameters, expected 3"
    gemma4 = getattr(gemma4_module, "AscendGemma4Proposer", None)
    if gemma4 is None:
        return "unknown: no AscendGemma4Proposer"
    if not (isinstance(gemma4, type) and isinstance(base, type) and issubclass(gemma4, base)):
        return "unknown: AscendGemma4Proposer does not derive from AscendSpecDecodeBaseProposer"
    own = gemma4.__dict__.get("_maybe_update_metadata")
    if own is not None:
        return PATCHED if is_marked(own) else "overridden"
    if hasattr(gemma4_module, "_LayerResolvedSource"):
        return "overridden"
    return "stock"


def detect(modules: AscendModules) -> Detection:
    shared_cls = getattr(modules.updatable_graph, "SharedSource", None)
    shared = classify_shared_source(shared_cls) if shared_cls is not None else "unknown: no SharedSource"
    proposer = classify_proposer(modules.base_proposer, modules.gemma4_proposer)
    has_graph = hasattr(modules.updatable_graph, "UpdatableGraph")
    return Detection(shared, proposer, _refusal(shared, proposer, has_graph))


def _draft_updates_refusal(shared: str, has_graph: bool) -> str:
    graph = "UpdatableGraph present" if has_graph else "no UpdatableGraph class"
    return (
        f"this vllm-ascend has the draft-graph API of vllm-ascend 6f1ce9b8 ({graph}, SharedSource shape "
        f"{shared}, AscendSpecDecodeBaseProposer has no _maybe_update_metadata): the flattening is in "
        "_build_draft_attn_metadata_updates (one representative layer per draft step, handed over with "
        "set_draft_attn_metadata_updates) and, for draft steps >= 1, in _propose, which binds every draft "
        "layer to one KV-cache group's metadata; the patch does not rewrite _propose or dummy_run, so the "
        "build keeps the bug"
    )


def _refusal(shared: str, proposer: str, has_graph: bool = True) -> str:
    if shared == LAYER_TAGGED:
        return f"this vllm-ascend already resolves draft params per layer (SharedSource shape: {LAYER_TAGGED})"
    if shared == DELEGATING or proposer == "overridden":
        return (
            "this vllm-ascend already resolves draft params per layer "
            f"(upstream fix present: SharedSource {shared}, AscendGemma4Proposer {proposer})"
        )
    if proposer == DRAFT_UPDATES and shared in (SEQUENCE, PATCHED):
        return _draft_updates_refusal(shared, has_graph)
    if shared.startswith("unknown") or shared == INDEXED:
        return f"unrecognised vllm-ascend draft-graph API ({UPDATABLE_GRAPH}.SharedSource: {shared})"
    if proposer.startswith("unknown") or proposer == DRAFT_UPDATES:
        return f"unrecognised vllm-ascend proposer API ({proposer.removeprefix('unknown: ')})"
    # Any mix of SEQUENCE/PATCHED with stock/PATCHED is installable: the installer completes whichever
    # half is missing (e.g. after a module reload replaced one of the two patched objects).
    return ""
