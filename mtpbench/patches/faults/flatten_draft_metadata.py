"""Fault `flatten-draft-metadata`: bind every Gemma4 MTP draft layer to one KV-cache group's metadata.

This reproduces the vllm-ascend graph-mode regression on any vLLM build that has the Gemma4 MTP proposer
(`vllm.v1.spec_decode.gemma4.Gemma4Proposer`). Gemma4's drafter spans two KV-cache groups: its sliding
layers read the KV of the target's last sliding layer, its full layer that of the target's full layer,
and `Gemma4Proposer.build_per_group_and_layer_attn_metadata` builds one attention-metadata object per
group (each with that group's block table and window) for every draft step. The patch wraps that method
and rewrites its per-layer dict so every draft layer gets the metadata of one representative layer: the
first name met when iterating the proposer's `_draft_attn_layer_names`, the very set vLLM iterates to
order its draft attention groups. Set order of strings follows PYTHONHASHSEED, so, as in the original bug,
which group "wins" changes from process to process and is fixed within one; the target still verifies
every token, so the text is unchanged and only acceptance falls. Applying is explicit (never at import),
idempotent, standard library only until `apply()` imports vLLM.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from mtpbench.patches.contract import class_method

T = TypeVar("T")

_MODULE = "vllm.v1.spec_decode.gemma4"
_CLASS = "Gemma4Proposer"
_METHOD = "build_per_group_and_layer_attn_metadata"
# Set on the wrapper so a second apply() (worker and vLLM plugin hook may both ask) finds it in place.
_MARKER = "__mtpbench_flatten_draft_metadata__"

_log = logging.getLogger(__name__)

# The representative draft layer and its KV-cache group id, filled on the first draft step of this
# process, so a worker can record which group order the hash seed produced. Nothing else is kept.
_chosen: dict[str, object] = {}


def representative_layer(per_layer: Mapping[str, object], order: Iterable[str]) -> str | None:
    """The first name in `order` that has metadata in `per_layer`; None when none has."""
    for name in order:
        if name in per_layer:
            return name
    return None


def flatten_layer_metadata(per_layer: Mapping[str, T], order: Iterable[str]) -> dict[str, T]:
    """Bind every layer of `per_layer` to the metadata of its representative layer (see above).

    The keys are kept exactly (every draft layer must still find an entry in the forward context); only
    the values collapse to one object. With no representative the mapping is returned unchanged (copied).
    """
    chosen = representative_layer(per_layer, order)
    if chosen is None:
        return dict(per_layer)
    shared = per_layer[chosen]
    return {name: shared for name in per_layer}


def chosen() -> dict[str, object]:
    """What the patched proposer picked in this process: `layer` and `kv_cache_group_id` (empty before
    the first draft step or when the patch is not applied)."""
    return dict(_chosen)


def _group_id_of(proposer: Any, layer_name: str) -> int | None:
    # draft_attn_groups is the proposer's list of AttentionGroup (layer_names, kv_cache_group_id).
    for group in getattr(proposer, "draft_attn_groups", None) or ():
        if layer_name in getattr(group, "layer_names", ()):
            gid = getattr(group, "kv_cache_group_id", None)
            return gid if isinstance(gid, int) else None
    return None


def _make_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def flattened(self: Any, *args: Any, **kwargs: Any) -> Any:
        per_group, per_layer = original(self, *args, **kwargs)
        # Iterate the same set vLLM iterates (not a sorted copy): its order is what PYTHONHASHSEED moves.
        order = getattr(self, "_draft_attn_layer_names", None) or per_layer
        layer = representative_layer(per_layer, order)
        if layer is None:
            return per_group, per_layer
        if not _chosen:
            _chosen.update(layer=layer, kv_cache_group_id=_group_id_of(self, layer))
            _log.warning(
                "mtpbench fault flatten-draft-metadata: all %d draft layers bound to %s (KV-cache group %s)",
                len(per_layer),
                layer,
                _chosen["kv_cache_group_id"],
            )
        # per_group is left as built: vLLM only type-checks it; the layers read the per-layer dict.
        return per_group, flatten_layer_metadata(per_layer, (layer,))

    setattr(flattened, _MARKER, True)
    return flattened


def _description() -> str:
    return (
        f"{_MODULE}.{_CLASS}.{_METHOD} wrapped: every draft layer bound to the attention metadata of "
        "the first layer in _draft_attn_layer_names set order (group chosen by PYTHONHASHSEED)"
    )


def apply() -> str:
    """Patch vLLM in this process; return one line saying what changed (see the module docstring)."""
    cls, current = class_method(_MODULE, _CLASS, _METHOD, "Gemma4 MTP proposer")
    if getattr(current, _MARKER, False):
        return _description()
    # Assigned on the class (not per instance) because the proposer is built inside LLM(...), after this.
    setattr(cls, _METHOD, _make_wrapper(current))
    return _description()


# The worker calls `observations()` of every applied patch after the prompts and records it per repeat,
# so a run shows which group order each PYTHONHASHSEED produced.
observations = chosen
