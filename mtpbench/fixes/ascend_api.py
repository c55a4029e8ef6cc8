"""Recognises which shape of vllm-ascend's draft-graph parameter API a build has (pure logic, stdlib only).

The per-layer fix only makes sense against one shape of the API, so the installer first classifies the
modules it touches or relies on — `vllm_ascend.compilation.updatable_graph` (`SharedSource`),
`vllm_ascend.spec_decode.llm_base_proposer` (`AscendSpecDecodeBaseProposer._maybe_update_metadata`),
`vllm_ascend.spec_decode.gemma4_proposer` (`AscendGemma4Proposer`) and `vllm_ascend.compilation.acl_graph`
(`ACLGraphWrapper`, the draft runnable whose `update_draft_model_metadata` receives the params).
`SharedSource` is classified by *behaviour*, calling its `get` on small probe objects (it is a plain
dataclass, no device needed), so a reformatted or renamed implementation is still recognised by what it
does. Shapes found in vllm-ascend and its forks (docs/ascend.md's shapes table names the commits):

- `shared-source-sequence`: `get(provider) -> self.params`, the same per-step list for every provider.
  The flattening shape. The fix applies only when (a) the proposer hands its per-step list over through
  the two-argument hook `_maybe_update_metadata(attn_backend, multi_steps_attn_metadata)`, (b) the draft
  graph wrapper has the `update_draft_model_metadata` that hook calls, and (c) the hook is reached: the
  `_propose` that `AscendGemma4Proposer` resolves to is the base proposer's, or names the hook. Each
  missing condition is a refusal, because the installed wrapper would otherwise run the stock code (or
  never run) while the patch said `applied`. It is also refused when the list comes from
  `_build_draft_attn_metadata_updates` through `ACLGraphWrapper.set_draft_attn_metadata_updates`
  (vllm-ascend 6f1ce9b8, `DRAFT_UPDATES` below): there the draft steps >= 1 are already bound to one
  KV-cache group inside `_propose`, before any param source could resolve them per layer.
- `shared-source-layer-tagged`: params carry `layer_name` and `get` keeps the provider's own entries.
  This is the maintainers' shape (vllm-ascend forks zzhx1 34bb51f9, zhenwenqi2024 51ac0e0c, lqh-hh
  41248962, vLLM-HUST 5331e27c). Already resolves per layer; nothing to do.
- `shared-source-delegating`: `SharedSource` forwards to a `ParamSource` (with `AscendGemma4Proposer`
  handing over a `_LayerResolvedSource`): the shape of vllm-ascend PR #16737, closed without being
  merged (known only from its unit test `tests/ut/spec_decode/test_gemma4_proposer.py` @ 0743d9f1). Not
  an upstream fix; it is refused as already resolving per layer.
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
ACL_GRAPH = "vllm_ascend.compilation.acl_graph"

SEQUENCE = "shared-source-sequence"
LAYER_TAGGED = "shared-source-layer-tagged"
DELEGATING = "shared-source-delegating"
INDEXED = "shared-source-indexed"
PATCHED = "patched"
# Proposer shape of vllm-ascend 6f1ce9b8: no `_maybe_update_metadata`; the draft params are built by
# `_build_draft_attn_metadata_updates` (one representative layer per step) and handed to the graph wrapper
# with `set_draft_attn_metadata_updates`, from `_propose` and `dummy_run`.
DRAFT_UPDATES = "draft-attn-metadata-updates"
# AscendGemma4Proposer resolves to a `_propose` that is not the base proposer's and never names the hook
# (a per-group fork of the draft loop, as in a stored gemma4_proposer.py): the wrapped hook would be inert.
FORKED_PROPOSE = "forked-propose"
# The two parameters the fix's hook wrapper binds by position after `self`.
HOOK_PARAMS = ("attn_backend", "multi_steps_attn_metadata")


@dataclass(frozen=True)
class AscendModules:
    """The three vllm-ascend modules the fix touches (real modules, or fakes in tests)."""

    updatable_graph: Any
    base_proposer: Any
    gemma4_proposer: Any
    # vllm_ascend.compilation.acl_graph, or None when it did not import: the wrapper is then unknown and
    # the fix is refused (it could not tell whether its hook's update call exists).
    acl_graph: Any = None


@dataclass(frozen=True)
class Detection:
    shared_source: str  # one of the shape names above, or "unknown: <why>"
    proposer: str  # "stock" | "patched" | "overridden" | DRAFT_UPDATES | FORKED_PROPOSE | "unknown: <why>"
    # "ok" when ACLGraphWrapper has update_draft_model_metadata, else "unknown: <why>" / "no update: <what>".
    wrapper: str = "ok"
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


def _hook_signature_problem(hook: Any) -> str:
    """Why the wrapper cannot bind `hook` as (self, attn_backend, multi_steps_attn_metadata); "" when it can.

    The wrapper passes the metadata list as the second positional argument after `self`. A hook with
    another arity, or whose second parameter is not the metadata (PR #15908's review diff,
    llm_base_proposer.py:633: `_maybe_update_metadata(self, att_backend, aclgraph_runtime_mode,
    multi_steps_attn_metadata)`), would get the graph mode where it expects the per-step list.
    """
    try:
        params = list(inspect.signature(hook).parameters.values())
    except (TypeError, ValueError):
        return "its signature cannot be read"
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return "it takes *args, so what binds to the metadata parameter cannot be known"
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    shown = ", ".join(positional)
    if len(positional) != 3:
        return (
            f"it takes {len(positional)} positional parameters ({shown}), not the 3 the fix binds "
            f"(self, {', '.join(HOOK_PARAMS)})"
        )
    if "runtime_mode" in positional[1] or "runtime_mode" in positional[2]:
        return f"its parameters are ({shown}): a graph runtime mode where the fix passes the backend or metadata"
    return ""


def _code_names(func: Any) -> set[str]:
    """Every attribute/global name a function's code (and the code nested in it) refers to."""
    code = getattr(inspect.unwrap(func), "__code__", None)
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(c for c in current.co_consts if inspect.iscode(c))
    return names


def _propose_problem(base: type, gemma4: type) -> str:
    """Whether the hook the fix wraps is reached from the `_propose` AscendGemma4Proposer runs; "" if so."""
    propose = inspect.getattr_static(gemma4, "_propose", None)
    base_propose = inspect.getattr_static(base, "_propose", None)
    if propose is None:
        return "unknown: AscendGemma4Proposer has no _propose"
    if propose is base_propose:
        return ""
    if "_maybe_update_metadata" in _code_names(propose):
        return ""
    owner = next((c.__qualname__ for c in gemma4.__mro__ if "_propose" in vars(c)), "?")
    return f"{FORKED_PROPOSE}: {owner}._propose"


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
    problem = _hook_signature_problem(hook)
    if problem:
        return f"unknown: AscendSpecDecodeBaseProposer._maybe_update_metadata cannot be wrapped: {problem}"
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
    forked = _propose_problem(base, gemma4)
    return forked or "stock"


def classify_wrapper(acl_graph_module: Any) -> str:
    """ "ok" when the draft graph wrapper has the `update_draft_model_metadata` the hook hands params to."""
    if acl_graph_module is None:
        return f"unknown: {ACL_GRAPH} did not import"
    wrapper = getattr(acl_graph_module, "ACLGraphWrapper", None)
    if wrapper is None:
        return f"unknown: {ACL_GRAPH} has no ACLGraphWrapper"
    if callable(getattr(wrapper, "update_draft_model_metadata", None)):
        return "ok"
    others = sorted(
        n for n in ("set_draft_attn_metadata_updates", "set_attn_backend") if callable(getattr(wrapper, n, None))
    )
    has = f" (it has {', '.join(others)})" if others else ""
    return f"no update: ACLGraphWrapper has no update_draft_model_metadata{has}"


def detect(modules: AscendModules) -> Detection:
    shared_cls = getattr(modules.updatable_graph, "SharedSource", None)
    shared = classify_shared_source(shared_cls) if shared_cls is not None else "unknown: no SharedSource"
    proposer = classify_proposer(modules.base_proposer, modules.gemma4_proposer)
    wrapper = classify_wrapper(modules.acl_graph)
    has_graph = hasattr(modules.updatable_graph, "UpdatableGraph")
    return Detection(shared, proposer, wrapper, _refusal(shared, proposer, has_graph, wrapper))


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


def _refusal(shared: str, proposer: str, has_graph: bool = True, wrapper: str = "ok") -> str:
    if shared == LAYER_TAGGED:
        return (
            "this vllm-ascend already resolves draft params per layer (SharedSource shape: "
            f"{LAYER_TAGGED}, the maintainers' layer-tagged params)"
        )
    if shared == DELEGATING or proposer == "overridden":
        return (
            "this vllm-ascend already resolves draft params per layer "
            f"(SharedSource {shared}, AscendGemma4Proposer {proposer}: the delegating shape of vllm-ascend "
            "PR #16737, closed without being merged)"
        )
    if proposer == DRAFT_UPDATES and shared in (SEQUENCE, PATCHED):
        return _draft_updates_refusal(shared, has_graph)
    if shared.startswith("unknown") or shared == INDEXED:
        return f"unrecognised vllm-ascend draft-graph API ({UPDATABLE_GRAPH}.SharedSource: {shared})"
    if proposer.startswith(FORKED_PROPOSE):
        return (
            f"AscendGemma4Proposer runs its own draft loop ({proposer.removeprefix(FORKED_PROPOSE + ': ')}), "
            "which is not the base proposer's and never calls _maybe_update_metadata: the hook the patch "
            "wraps would be installed but never reached, so the build would keep its draft params as they are"
        )
    if proposer.startswith("unknown") or proposer == DRAFT_UPDATES:
        return f"unrecognised vllm-ascend proposer API ({proposer.removeprefix('unknown: ')})"
    if wrapper != "ok":
        return (
            f"the draft graph wrapper cannot take the per-layer source ({wrapper.split(': ', 1)[-1]}): the "
            "stock _maybe_update_metadata skips its update there, so the patched hook would run the stock "
            "code while reporting applied"
        )
    # Any mix of SEQUENCE/PATCHED with stock/PATCHED is installable: the installer completes whichever
    # half is missing (e.g. after a module reload replaced one of the two patched objects).
    return ""
