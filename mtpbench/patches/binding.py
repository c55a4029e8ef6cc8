"""Probe `metadata-binding`: which KV-cache group's attention metadata each Gemma4 MTP draft layer consumed.

A variant entry like the patches (off unless a variant names it), it changes no result: it watches, in the
worker's own process, every draft step of `Gemma4Proposer.propose` (vLLM 0.32,
vllm/v1/spec_decode/llm_base_proposer.py `propose`, inherited by vllm/v1/spec_decode/gemma4.py). For each
step it knows each KV-cache group's metadata object, as `build_per_group_and_layer_attn_metadata` built
it (its per-group list, one object per `draft_attn_groups` entry, each holding that group's block table);
for each draft attention layer it sees the metadata the layer actually consumed, by wrapping
`vllm.model_executor.layers.attention.attention.get_attention_context`, the lookup that
`unified_attention_with_output` (eager and compiled alike) hands to the backend's `impl.forward`. The two
are matched by object identity, then by the identity (or storage and shape) of the block-table tensor;
never by names. A metadata that matches no group of its step is counted as "unidentified".

The table it records (`observations()`, stored in the cell_end record by the worker) is, per draft layer:
its own group and attention type, and per draft step (position 0..k-1) how many times it read each group.
A step is one forward context of the drafter within one `propose`; a layer is counted once per step.
The pure bookkeeping (`BindingRecorder`) needs no vLLM and is what the unit tests drive. Standard library
only at module level; `apply()` imports vLLM.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mtpbench.patches.contract import PatchNotApplicable

PROBE_NAME = "metadata-binding"
UNIDENTIFIED = "unidentified"
_PROPOSER = "vllm.v1.spec_decode.gemma4"
_ATTENTION = "vllm.model_executor.layers.attention.attention"
_BUILD = "build_per_group_and_layer_attn_metadata"
_MARKER = "__mtpbench_metadata_binding__"


def _block_table(metadata: Any) -> Any:
    for name in ("block_table", "block_table_tensor", "block_tables"):
        value = getattr(metadata, name, None)
        if value is not None:
            return value
    return None


def _same_tensor(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:  # a view of the same storage and shape is the same block table (torch tensors; duck-typed)
        return bool(a.data_ptr() == b.data_ptr() and tuple(a.shape) == tuple(b.shape))
    except (AttributeError, TypeError):
        return False


def attention_type(spec: Any) -> str:
    """ "sliding_attention" / "full_attention" from a KV-cache spec (vLLM's SlidingWindowSpec has a window)."""
    if getattr(spec, "sliding_window", None):
        return "sliding_attention"
    name = type(spec).__name__
    return "full_attention" if name in ("FullAttentionSpec", "AttentionSpec") else name


class BindingRecorder:
    """Per draft layer and draft step, which group's metadata it consumed (pure bookkeeping)."""

    def __init__(self) -> None:
        self.groups: list[dict[str, Any]] = []  # {"id", "type", "layers"} in draft_attn_groups order
        self.own: dict[str, int] = {}
        self.types: dict[str, str] = {}
        self.table: dict[str, list[dict[str, int]]] = {}
        self.proposes = 0
        self.active = False
        self._current: list[tuple[int, Any]] = []
        self._context: object | None = None
        self._step = -1
        self._seen: set[str] = set()

    def set_groups(self, groups: Iterable[tuple[int, str, Sequence[str]]]) -> None:
        """(group id, attention type, layer names) of the drafter, once."""
        if self.groups:
            return
        for gid, kind, layers in groups:
            self.groups.append({"id": gid, "type": kind, "layers": list(layers)})
            for name in layers:
                self.own[name] = gid
                self.types[name] = kind

    def start_propose(self) -> None:
        self.active = True
        self.proposes += 1
        self._context, self._step, self._seen = None, -1, set()

    def end_propose(self) -> None:
        self.active = False

    def groups_built(self, per_group: Sequence[tuple[int, Any]]) -> None:
        """Each group's metadata object for the step(s) about to run."""
        self._current = list(per_group)

    def identify(self, metadata: Any) -> str:
        for gid, built in self._current:
            if built is metadata:
                return str(gid)
        table = _block_table(metadata)
        if table is not None:
            for gid, built in self._current:
                other = _block_table(built)
                if other is not None and _same_tensor(table, other):
                    return str(gid)
        return UNIDENTIFIED

    def consumed(self, layer: str, metadata: Any, context: object) -> None:
        if not self.active or metadata is None or layer not in self.own:
            return
        if context is not self._context:  # a new forward context of the drafter: the next draft step
            self._context, self._step, self._seen = context, self._step + 1, set()
        if layer in self._seen:  # the KV-cache update and the attention of one step read the same entry
            return
        self._seen.add(layer)
        steps = self.table.setdefault(layer, [])
        while len(steps) <= self._step:
            steps.append({})
        read = self.identify(metadata)
        steps[self._step][read] = steps[self._step].get(read, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "probe": PROBE_NAME,
            "proposes": self.proposes,
            "groups": [dict(g, layers=list(g["layers"])) for g in self.groups],
            "layers": {
                name: {
                    "own_group": self.own[name],
                    "type": self.types[name],
                    "steps": [dict(s) for s in self.table.get(name, [])],
                }
                for name in sorted(self.own)
            },
        }


_recorder = BindingRecorder()


def _wrap_build(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def build(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        groups = list(getattr(self, "draft_attn_groups", None) or ())
        _recorder.set_groups(
            (g.kv_cache_group_id, attention_type(getattr(g, "kv_cache_spec", None)), g.layer_names) for g in groups
        )
        per_group = result[0] if isinstance(result, tuple) else []
        # vLLM builds the per-group list in draft_attn_groups order (gemma4.py); a fault that rewrites only
        # the per-layer dict (flatten-draft-metadata) leaves it as built.
        _recorder.groups_built([(g.kv_cache_group_id, md) for g, md in zip(groups, per_group, strict=False)])
        return result

    setattr(build, _MARKER, True)
    return build


def _wrap_propose(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        _recorder.start_propose()
        try:
            return original(self, *args, **kwargs)
        finally:
            _recorder.end_propose()

    setattr(propose, _MARKER, True)
    return propose


def _wrap_context(original: Callable[..., Any], current_context: Callable[[], object]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get_attention_context(layer_name: str) -> Any:
        found = original(layer_name)
        if _recorder.active:
            _recorder.consumed(layer_name, found[0], current_context())
        return found

    setattr(get_attention_context, _MARKER, True)
    return get_attention_context


def apply() -> str:
    """Install the probe in this process (idempotent); one line saying where it listens."""
    try:
        proposers = importlib.import_module(_PROPOSER)
        attention = importlib.import_module(_ATTENTION)
        forward_context = importlib.import_module("vllm.forward_context")
    except ImportError as exc:
        raise PatchNotApplicable(f"no Gemma4 MTP proposer / attention layer in this vLLM ({exc})") from exc
    cls = getattr(proposers, "Gemma4Proposer", None)
    lookup = getattr(attention, "get_attention_context", None)
    if not isinstance(cls, type) or not callable(getattr(cls, _BUILD, None)) or not callable(lookup):
        raise PatchNotApplicable(
            f"this vLLM lacks {_PROPOSER}.Gemma4Proposer.{_BUILD} or {_ATTENTION}.get_attention_context"
        )
    if not getattr(cls.propose, _MARKER, False):
        cls.propose = _wrap_propose(cls.propose)
    if not getattr(getattr(cls, _BUILD), _MARKER, False):
        setattr(cls, _BUILD, _wrap_build(getattr(cls, _BUILD)))
    if not getattr(lookup, _MARKER, False):
        attention.get_attention_context = _wrap_context(lookup, forward_context.get_forward_context)
    return (
        f"{PROBE_NAME} probe: records, per Gemma4 MTP draft layer and draft step, the KV-cache group whose "
        "attention metadata it consumed (get_attention_context vs the step's per-group metadata)"
    )


def observations() -> dict[str, Any]:
    """The binding table of this process (read by the worker after the prompts)."""
    return _recorder.snapshot()
