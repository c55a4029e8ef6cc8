"""Per-layer draft parameter resolution for vllm-ascend graph replay, as pure logic (standard library only).

On vllm-ascend, a captured draft graph is refreshed before replay through `UpdatableGraph.resolve_tasks
(source)`: every attention *provider* (it has a `layer_name` and `resolve(per_layer_metadata) -> params`)
asks the *param source* for one params dict per draft step (`source.get(provider) -> Sequence[params]`).
The stock draft source is `SharedSource(params)`, which hands every provider the same per-step list, built
from one representative layer per step. With Gemma4 MTP the draft layers span two KV-cache groups
(sliding and full attention), so all of them get one group's block table and sequence lengths.

`LayerResolvedSource` is the param source that fixes it: each provider resolves its params from its own
layer's metadata at every step, a provider without a layer name keeps the representative params, and a
step that lacks the provider's layer is an error instead of a silent wrong binding.
`delegating_shared_get` and `layer_resolved_update` are the two hooks the installer puts into vllm-ascend
(`SharedSource.get` delegates to a param source when one is supplied; the proposer's metadata update
supplies one). This is mtpbench's own fix for the sequence-`SharedSource` shape. It is not upstream code:
vllm-ascend PR #16737 proposed a similar delegating `SharedSource` + `_LayerResolvedSource` and was closed
without being merged; the maintainers' shape tags each param with its `layer_name` and lets
`SharedSource.get` keep the provider's own entries (the installer leaves such a build alone). Nothing here
imports vllm, vllm_ascend or torch, so all of it is testable on any machine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol

Params = dict[str, Any]
# One draft step's attention metadata: layer name -> that layer's metadata object.
StepMetadata = Mapping[Hashable, Any]

PATCH_NAME = "ascend-gemma4-layer-params"
# Set on every function this package installs, so a second apply() recognises its own work.
PATCH_MARK = "__mtpbench_patch__"

logger = logging.getLogger("mtpbench.fixes")

# How often the installed hook ran in this process, and how often it handed a per-layer source to the
# graph wrapper: the evidence that the hook is reached at all (an inert install reads 0 / 0).
_counts: dict[str, int] = {"hook_calls": 0, "layer_resolved_updates": 0}


def hook_counts() -> dict[str, int]:
    return dict(_counts)


class ParamProvider(Protocol):
    def resolve(self, context: Any) -> Params: ...


class MissingLayerMetadata(LookupError):
    """A draft step has no metadata for the layer a provider stands for."""

    def __init__(self, layer_name: Hashable, step: int, available: Sequence[Hashable]) -> None:
        self.layer_name = layer_name
        self.step = step
        self.available = list(available)
        shown = ", ".join(repr(n) for n in self.available[:8]) + (" …" if len(self.available) > 8 else "")
        super().__init__(
            f"draft step {step} has no attention metadata for layer {layer_name!r} "
            f"(layers present: {shown or 'none'}); refusing to bind another layer's block table to it"
        )


class LayerResolvedSource:
    """A `ParamSource` for a draft graph whose params are resolved per layer, not per step.

    `step_metadata[i]` maps each draft layer to its attention metadata at draft step i (the proposer's
    `multi_steps_attn_metadata`). `representative_params`, when given, is what the stock code computed
    for the step (one representative layer); providers without a layer name keep exactly that.
    """

    __slots__ = ("representative_params", "step_metadata")

    def __init__(
        self,
        step_metadata: Sequence[StepMetadata],
        representative_params: Sequence[Params] | None = None,
    ) -> None:
        self.step_metadata: list[StepMetadata] = list(step_metadata)
        if representative_params is not None and len(representative_params) != len(self.step_metadata):
            # The stock list must be one entry per draft step; anything else is an API shape this fix
            # was not written for, and binding it would misalign steps.
            raise ValueError(
                f"{PATCH_NAME}: stock draft params have {len(representative_params)} entries for "
                f"{len(self.step_metadata)} draft steps; not the vllm-ascend shape the patch recognised"
            )
        self.representative_params: list[Params] | None = (
            None if representative_params is None else list(representative_params)
        )

    def get(self, provider: Any) -> list[Params]:
        layer_name = getattr(provider, "layer_name", None)
        if layer_name is None:
            return self._representative(provider)
        params: list[Params] = []
        for index, step in enumerate(self.step_metadata):
            if layer_name not in step:
                raise MissingLayerMetadata(layer_name, index, list(step))
            # Only the provider's own layer is visible to it: reading any other layer fails loudly
            # instead of silently binding that layer's KV-cache group.
            params.append(provider.resolve({layer_name: step[layer_name]}))
        return params

    def _representative(self, provider: ParamProvider) -> list[Params]:
        if self.representative_params is not None:
            return list(self.representative_params)
        params: list[Params] = []
        for index, step in enumerate(self.step_metadata):
            if not step:
                raise MissingLayerMetadata("<representative>", index, [])
            first = next(iter(step))
            params.append(provider.resolve({first: step[first]}))
        return params

    def __repr__(self) -> str:
        layers = sorted({str(name) for step in self.step_metadata for name in step})
        return f"LayerResolvedSource(steps={len(self.step_metadata)}, layers={layers})"


def is_param_source(obj: object) -> bool:
    """True for an object with `get(provider)`, false for the stock argument (a plain per-step list).

    Mappings are excluded because `dict.get` is not a param source's `get`.
    """
    return not isinstance(obj, (Sequence, Mapping)) and callable(getattr(obj, "get", None))


def is_layer_tagged(params: object) -> bool:
    """True for a non-empty list whose every entry names its layer (`{"layer_name": ..., ...}`)."""
    return (
        isinstance(params, Sequence)
        and not isinstance(params, (str, bytes))
        and len(params) > 0
        and all(isinstance(p, Mapping) and "layer_name" in p for p in params)
    )


def mark(func: Callable[..., Any], wrapped: Callable[..., Any]) -> Callable[..., Any]:
    setattr(func, PATCH_MARK, PATCH_NAME)
    func.__wrapped__ = wrapped  # type: ignore[attr-defined]
    func.__doc__ = f"[{PATCH_NAME}] {wrapped.__doc__ or ''}".strip()
    return func


def is_marked(func: object) -> bool:
    return getattr(func, PATCH_MARK, None) == PATCH_NAME


def delegating_shared_get(
    original_get: Callable[[Any, Any], Sequence[Params]],
) -> Callable[[Any, Any], Sequence[Params]]:
    """`SharedSource.get` that delegates to a param source held in `params`, else behaves as before."""

    def get(self: Any, provider: Any) -> Sequence[Params]:
        held = self.params
        if is_param_source(held):
            return held.get(provider)
        return original_get(self, provider)

    return mark(get, original_get)


def layer_resolved_update(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a proposer's `_maybe_update_metadata(attn_backend, multi_steps_attn_metadata)`.

    The stock method builds one params dict per draft step from a representative layer and hands the
    list to `self._runnable.update_draft_model_metadata(...)` (the ACL graph wrapper, which later wraps
    it in `SharedSource`). The wrapper lets the stock method run unchanged — its checks, its backend
    bookkeeping — and only replaces what reaches `update_draft_model_metadata`: a `LayerResolvedSource`
    over the same steps, keeping the stock list as the representative fallback.
    """

    def _maybe_update_metadata(
        self: Any,
        attn_backend: Any,
        multi_steps_attn_metadata: Sequence[StepMetadata],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        _counts["hook_calls"] += 1
        runnable = getattr(self, "_runnable", None)
        real_update = getattr(runnable, "update_draft_model_metadata", None)
        if not callable(real_update):
            # No graph wrapper (eager draft): the stock method has nothing to update either.
            return original(self, attn_backend, multi_steps_attn_metadata, *args, **kwargs)
        steps = list(multi_steps_attn_metadata)

        def update(params: Any) -> Any:
            if is_param_source(params) or is_layer_tagged(params):
                # Already resolved per layer (a param source, or the per-layer list vllm-ascend's unit
                # test of the base proposer expects): wrapping it would only misalign steps.
                return real_update(params)
            _counts["layer_resolved_updates"] += 1
            return real_update(LayerResolvedSource(steps, representative_params=params))

        # Shadow the method on this wrapper instance only for the duration of the stock call, so the
        # stock code (and any isinstance check it makes on `_runnable`) sees the real wrapper object.
        own = getattr(runnable, "__dict__", None)
        if own is None:
            logger.warning("%s: %s has no instance dict; draft params stay per step", PATCH_NAME, type(runnable))
            return original(self, attn_backend, multi_steps_attn_metadata, *args, **kwargs)
        had_own = "update_draft_model_metadata" in own
        previous = own.get("update_draft_model_metadata")
        own["update_draft_model_metadata"] = update
        try:
            return original(self, attn_backend, multi_steps_attn_metadata, *args, **kwargs)
        finally:
            if had_own:
                own["update_draft_model_metadata"] = previous
            else:
                own.pop("update_draft_model_metadata", None)

    return mark(_maybe_update_metadata, original)
