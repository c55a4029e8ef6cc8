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

Two more inputs of each draft layer are watched, because a proposer can hand a layer "its own" metadata object
with the wrong contents (vllm-ascend#16980: every group's metadata built with group 0's block table; issue 34):
- the block table inside the metadata it consumed, matched by storage (data pointer and row width: the proposer
  slices the runner's table to the batch) with the true per-group tables the runner gave the proposer for that
  step (`Gemma4Proposer._per_group_block_tables[gid]`, vLLM 0.32 gemma4.py lines 53-63 and 94-98, set by
  gpu_model_runner.py `set_per_group_block_table`);
- the KV cache it read: `get_attention_context` returns the layer's `kv_cache`, which vLLM binds to the very
  tensor of the target layer it shares (gpu_model_runner.py `initialize_kv_cache_tensors`:
  `kv_caches[layer_name] = kv_caches[target_layer_name]`), matched by identity (then storage) with the KV
  of every target attention layer that owns its KV. With it the probe records each target layer's attention
  type and each draft layer's own (its attention module's sliding window), so the judge can say which target
  layer's KV a draft layer read and whether it is the one Gemma4 MTP defines.

The table it records (`observations()`, stored in the cell_end record by the worker) is, per draft layer:
its own group and attention type, and per draft step (position 0..k-1) how many times it read each group's
metadata and each group's block table; which target layer's KV it read, in how many steps; and the target
attention layers (type, whether each owns its KV).
A step is one forward context of the drafter within one `propose`; a layer is counted once per step.
The pure bookkeeping (`BindingRecorder`) needs no vLLM and is what the unit tests drive. Standard library
only at module level; `apply()` imports vLLM.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
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


def _same_rows(a: Any, b: Any) -> bool:
    """`a` holds the rows of `b` (or is it): the proposer hands a layer `table[:batch_size]`, a view with the
    runner's storage and row width and fewer rows."""
    if a is b:
        return True
    try:
        return bool(a.data_ptr() == b.data_ptr() and tuple(a.shape)[1:] == tuple(b.shape)[1:])
    except (AttributeError, TypeError):
        return False


def _kv_tensor(kv: Any) -> Any:
    """A layer's KV cache: one tensor in vLLM 0.32, a list per virtual engine in older releases."""
    if isinstance(kv, (list, tuple)):
        return kv[0] if kv else None
    return kv


def _same_storage(a: Any, b: Any) -> bool:
    try:
        return bool(
            a.data_ptr() == b.data_ptr()
            and a.data_ptr() != 0
            and tuple(a.shape) == tuple(b.shape)
            and tuple(a.stride()) == tuple(b.stride())
        )
    except (AttributeError, TypeError):
        return False


def module_type(layer: Any) -> str:
    """An attention module's own type: vLLM's Attention keeps the sliding window it was built with."""
    return "sliding_attention" if getattr(layer, "sliding_window", None) else "full_attention"


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
        self.tables: dict[str, list[dict[str, int]]] = {}  # layer -> per step: group whose block table it read
        self.kv: dict[str, dict[str, int]] = {}  # layer -> target layer whose KV it read -> steps
        self.module_types: dict[str, str] = {}  # layer -> its attention module's own type
        self.targets: dict[str, dict[str, Any]] = {}  # target attention layer -> {"type", "owns_kv"}
        self.proposes = 0
        self.active = False
        self._current: list[tuple[int, Any]] = []
        self._true_tables: list[tuple[int, Any]] = []
        self._owners: list[tuple[str, Any]] | None = None
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
        self._owners = None  # KV caches are bound once, but read them afresh per propose: cheap, never stale

    def end_propose(self) -> None:
        self.active = False

    def groups_built(self, per_group: Sequence[tuple[int, Any]], true_tables: Sequence[tuple[int, Any]] = ()) -> None:
        """Each group's metadata object for the step(s) about to run, and each group's true block table (the
        runner's, as the proposer was given it; empty where the proposer keeps none)."""
        self._current = list(per_group)
        self._true_tables = list(true_tables)

    def table_group(self, metadata: Any) -> str | None:
        """The group whose true block table the metadata holds; None when there is nothing to compare."""
        table = _block_table(metadata)
        if table is None or not self._true_tables:
            return None
        for gid, true in self._true_tables:
            if _same_rows(table, true):
                return str(gid)
        return UNIDENTIFIED

    def learn_layers(self, layers: Mapping[str, Any]) -> None:
        """The attention layers of the forward context (target and draft): types, and who owns which KV."""
        owners: list[tuple[str, Any]] = []
        for name, module in layers.items():
            kv = _kv_tensor(getattr(module, "kv_cache", None))
            if name in self.own:
                self.module_types[name] = module_type(module)
                continue
            if kv is None or not hasattr(module, "kv_sharing_target_layer_name"):
                continue  # not an attention layer with a KV cache
            owns = not getattr(module, "kv_sharing_target_layer_name", None)
            self.targets[name] = {"type": module_type(module), "owns_kv": owns}
            if owns:
                owners.append((name, kv))
        self._owners = owners

    def kv_owner(self, kv: Any) -> str:
        """The target layer that owns the KV tensor a draft layer was handed (identity, then storage)."""
        kv = _kv_tensor(kv)
        if kv is None or not self._owners:
            return UNIDENTIFIED
        same = [name for name, tensor in self._owners if tensor is kv]
        if not same:
            same = [name for name, tensor in self._owners if _same_storage(tensor, kv)]
        return "|".join(sorted(same)) if same else UNIDENTIFIED

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

    def consumed(self, layer: str, metadata: Any, context: object, kv: Any = None) -> None:
        if not self.active or metadata is None or layer not in self.own:
            return
        if self._owners is None:
            self.learn_layers(getattr(context, "no_compile_layers", None) or {})
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
        table = self.table_group(metadata)
        if table is not None:
            tables = self.tables.setdefault(layer, [])
            while len(tables) <= self._step:
                tables.append({})
            tables[self._step][table] = tables[self._step].get(table, 0) + 1
        if self._owners:
            owner = self.kv_owner(kv)
            reads = self.kv.setdefault(layer, {})
            reads[owner] = reads.get(owner, 0) + 1

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
                    "layer_type": self.module_types.get(name),
                    "tables": [dict(s) for s in self.tables.get(name, [])],
                    "kv": dict(self.kv.get(name, {})),
                }
                for name in sorted(self.own)
            },
            "targets": {name: dict(info) for name, info in sorted(self.targets.items())},
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
        # The true tables: what the runner handed the proposer for this step (vLLM 0.32 gemma4.py), whatever the
        # proposer then put in each group's metadata.
        true_tables = dict(getattr(self, "_per_group_block_tables", None) or {})
        _recorder.groups_built(
            [(g.kv_cache_group_id, md) for g, md in zip(groups, per_group, strict=False)],
            sorted(true_tables.items()),
        )
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
            kv = found[2] if isinstance(found, tuple) and len(found) > 2 else None
            _recorder.consumed(layer_name, found[0], current_context(), kv)
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
        "attention metadata and block table it consumed and the target layer whose KV it read "
        "(get_attention_context vs the step's per-group metadata and _per_group_block_tables)"
    )


def observations() -> dict[str, Any]:
    """The binding table of this process (read by the worker after the prompts)."""
    return _recorder.snapshot()
