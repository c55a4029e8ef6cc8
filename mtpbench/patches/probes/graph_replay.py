"""Probe `graph-replay`: did the drafter really run captured graphs, counted inside the engine's process?

`Replaying aclgraph` (vllm-ascend compilation/acl_graph.py:252 @ 182b75ea) is logged with `info_once`,
once per process and shared by target and draft, so a log line cannot tell that the *draft* replayed;
vLLM's `CUDAGraphWrapper` (vllm/compilation/cuda_graph.py, vLLM 0.32.0) counts captures process-wide
(`compilation_counter.num_cudagraph_captured`) and replays not at all. This probe (a variant entry, off
unless named; it changes nothing) records instead:

- which runnable the drafter calls (vllm-ascend: `drafter._runnable`, an `ACLGraphWrapper` after
  "Wrapping draft model with ACLGraphWrapper"; vLLM: `drafter.model`, a `CUDAGraphWrapper` or
  `BreakableCUDAGraphWrapper` when the drafter has graphs) and whether it is a graph wrapper;
- how many graphs that wrapper holds (`concrete_cudagraph_entries` / `concrete_aclgraph_entries` /
  `entries`, the captured ones only);
- every call a graph wrapper gets while a proposer's `propose` runs (the drafter's calls), classified
  exactly as the wrapper's own `__call__` branches: eager (runtime mode NONE or not the wrapper's), capture
  (no captured graph for the batch descriptor yet) or replay.

`classify` is the pure part, tested against fakes of the three wrappers. Standard library only at module
level; `apply()` imports what the build has.
"""

from __future__ import annotations

import functools
import importlib
import weakref
from collections.abc import Callable
from typing import Any

from mtpbench.patches.contract import PatchNotApplicable

PROBE_NAME = "graph-replay"
_MARKER = "__mtpbench_graph_replay__"
ENTRY_ATTRS = ("concrete_cudagraph_entries", "concrete_aclgraph_entries", "entries")
GRAPH_ATTRS = ("cudagraph", "aclgraph", "capture")
# (module, class) of every graph wrapper and proposer base this probe knows; the missing ones are skipped.
WRAPPERS = (
    ("vllm.compilation.cuda_graph", "CUDAGraphWrapper"),
    ("vllm.compilation.breakable_cudagraph", "BreakableCUDAGraphWrapper"),
    ("vllm_ascend.compilation.acl_graph", "ACLGraphWrapper"),
)
PROPOSERS = (
    ("vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer"),
    ("vllm_ascend.spec_decode.llm_base_proposer", "AscendSpecDecodeBaseProposer"),
)


def entries_of(wrapper: Any) -> dict[Any, Any]:
    for name in ENTRY_ATTRS:
        value = getattr(wrapper, name, None) if not _is_plain_module(wrapper) else None
        if isinstance(value, dict):
            return value
    return {}


def _is_plain_module(obj: Any) -> bool:
    # A CUDAGraphWrapper forwards unknown attributes to its runnable; a plain model has none of these.
    return not any(name in type(obj).__dict__ or name in getattr(obj, "__dict__", {}) for name in ENTRY_ATTRS)


def is_graph_wrapper(obj: Any) -> bool:
    return obj is not None and not _is_plain_module(obj)


def captured(wrapper: Any) -> int:
    """Graphs the wrapper holds (entries whose graph exists: an entry is created just before its capture)."""
    return sum(1 for e in entries_of(wrapper).values() if any(getattr(e, a, None) is not None for a in GRAPH_ATTRS))


def _mode_name(mode: Any) -> str:
    return str(getattr(mode, "name", mode))


def classify(wrapper: Any, forward_context: Any) -> str:
    """What the wrapper's `__call__` is about to do: "eager", "capture" or "replay" (see the docstring)."""
    if forward_context is None:
        return "eager"
    mode = getattr(forward_context, "cudagraph_runtime_mode", None)
    wanted = getattr(wrapper, "runtime_mode", None)
    if mode is None or _mode_name(mode) == "NONE" or (wanted is not None and _mode_name(mode) != _mode_name(wanted)):
        return "eager"
    entry = entries_of(wrapper).get(getattr(forward_context, "batch_descriptor", None))
    if entry is None or all(getattr(entry, a, None) is None for a in GRAPH_ATTRS):
        return "capture"
    return "replay"


class ReplayRecorder:
    def __init__(self) -> None:
        self.depth = 0  # propose() calls in progress (a subclass's propose may call its base's)
        self.proposes = 0
        self.drafter: Callable[[], Any] = lambda: None
        self.draft_calls: dict[str, int] = {"eager": 0, "capture": 0, "replay": 0}
        self.wrappers: list[str] = []  # the graph wrapper classes this build has

    def call(self, wrapper: Any, forward_context: Any) -> None:
        if self.depth:
            kind = classify(wrapper, forward_context)
            self.draft_calls[kind] += 1

    def snapshot(self) -> dict[str, Any]:
        drafter = self.drafter()
        runnable = None
        if drafter is not None:
            runnable = getattr(drafter, "_runnable", None)
            if runnable is None:
                runnable = getattr(drafter, "model", None)
        wrapper = is_graph_wrapper(runnable)
        return {
            "probe": PROBE_NAME,
            "proposes": self.proposes,
            "drafter": None if drafter is None else type(drafter).__name__,
            "runnable": None if runnable is None else type(runnable).__name__,
            "graph_wrapper": wrapper,
            "captured": captured(runnable) if wrapper else 0,
            "draft_calls": dict(self.draft_calls),
            "wrappers_known": list(self.wrappers),
        }


_recorder = ReplayRecorder()


def _wrap_call(original: Callable[..., Any], context: Callable[[], Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _recorder.depth:
            try:
                ctx = context()
            except Exception:  # no forward context: the wrapper runs its runnable eagerly too
                ctx = None
            _recorder.call(self, ctx)
        return original(self, *args, **kwargs)

    setattr(__call__, _MARKER, True)
    return __call__


def _wrap_propose(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _recorder.depth:
            _recorder.proposes += 1
            _recorder.drafter = weakref.ref(self)
        _recorder.depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _recorder.depth -= 1

    setattr(propose, _MARKER, True)
    return propose


def _load(pairs: tuple[tuple[str, str], ...]) -> list[type]:
    found = []
    for module, name in pairs:
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except Exception:  # vllm_ascend raises more than ImportError without torch_npu
            continue
        if isinstance(cls, type):
            found.append(cls)
    return found


def _with_own_propose(bases: list[type]) -> list[type]:
    """The bases and every loaded subclass that defines its own `propose` (another probe may have set one on
    Gemma4Proposer): each is wrapped, the depth counter keeps nested calls one propose."""
    seen: list[type] = []
    stack = list(bases)
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return [c for c in seen if "propose" in c.__dict__]


def apply() -> str:
    wrappers, proposers = _load(WRAPPERS), _load(PROPOSERS)
    if not proposers:
        raise PatchNotApplicable("no speculative-decoding proposer base class in this build")
    try:
        fc = importlib.import_module("vllm.forward_context")
        context = fc.get_forward_context
    except (ImportError, AttributeError) as exc:
        raise PatchNotApplicable(f"no vllm.forward_context here ({exc})") from None
    for cls in wrappers:
        if not getattr(cls.__call__, _MARKER, False):
            cls.__call__ = _wrap_call(cls.__call__, context)
    for cls in _with_own_propose(proposers):
        if not getattr(cls.__dict__["propose"], _MARKER, False):
            cls.propose = _wrap_propose(cls.__dict__["propose"])
    _recorder.wrappers = [c.__name__ for c in wrappers]
    return (
        f"{PROBE_NAME} probe: counts the drafter's graph-wrapper calls (eager / capture / replay) during propose "
        f"and reads its runnable at the end (wrappers here: {', '.join(_recorder.wrappers) or 'none'})"
    )


def observations() -> dict[str, Any]:
    return _recorder.snapshot()
