"""The pair the reference replays: which targets and drafters it models (`check_pair`, a one-line refusal
naming anything else, before torch is imported) and how they are loaded (`load_pair`: transformers'
`Gemma4ForCausalLM` or `Gemma4ForConditionalGeneration`'s language model, and `Gemma4AssistantForCausalLM`,
in the engine's dtype on the chosen torch device), with the stop tokens the engine stops at.

Coverage: a target of model_type gemma4_text (`Gemma4ForCausalLM`) or gemma4 (`Gemma4ForConditionalGeneration`,
its language model), drafting by method `mtp` with a drafter of model_type `gemma4_assistant`, or by method
`ngram` or `suffix` with no drafter (mtpbench/reference/ngram.py's and suffix.py's lookups, over any target
it loads); or a deepseek_v3 target (`DeepseekV3ForCausalLM`) drafting by method `mtp` with its own one
next-token layer (vLLM's `deepseek_mtp`: the drafter is the target's checkpoint,
mtpbench/reference/deepseek_mtp.py); or a Llama target (`LlamaForCausalLM`) drafting by method `draft_model`
with a `LlamaForCausalLM` draft model (mtpbench/reference/draft_model.py's rule), by method `eagle3` with a
`LlamaForCausalLMEagle3` head, or by method `eagle` with a one-layer Llama EAGLE-1 head of the target's width
(mtpbench/reference/eagle.py). The weights must be on this host (a folder, or the Hugging Face cache for a hub
id). Any other method or architecture, or a method over a target it
is not modelled for, is refused: exit 2, one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtpbench.errors import UserError

if TYPE_CHECKING:
    import torch

TARGET_TYPES = {
    "gemma4_text": "Gemma4ForCausalLM",
    "gemma4": "Gemma4ForConditionalGeneration",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "llama": "LlamaForCausalLM",
}
DRAFTER_TYPES = {"gemma4_assistant": "Gemma4AssistantForCausalLM"}
# A DeepSeek target drafts with the next-token layer its own checkpoint carries (vLLM's deepseek_mtp).
DEEPSEEK_TYPE = "deepseek_v3"
# The speculative methods whose draft rule the reference replays: a drafter model's, or a lookup's (none).
MODEL_METHODS = ("mtp", "draft_model", "eagle", "eagle3")
LOOKUP_METHODS = ("ngram", "suffix")
# Which targets each drafting method is modelled over (a lookup reads token ids only: any target; the
# draft-model method's pairs are checked by _check_draft_model_pair).
METHOD_TARGETS = {
    "mtp": ("gemma4_text", "gemma4", "deepseek_v3"),
    "eagle": ("llama",),
    "eagle3": ("llama",),
    "ngram": tuple(TARGET_TYPES),
    "suffix": tuple(TARGET_TYPES),
}
# The EAGLE-3 head's architecture (its config's model_type is plain "llama": the architecture tells it).
EAGLE3_ARCHITECTURE = "LlamaForCausalLMEagle3"
# An EAGLE-1 head's config names a plain Llama; vLLM's method eagle makes it EagleLlamaForCausalLM.
EAGLE1_ARCHITECTURE = "LlamaForCausalLM"
# The draft-model method's pairs: any target and draft model the replay loads as a causal LM over one vocabulary.
DRAFT_MODEL_TARGET_TYPES = {"llama": "LlamaForCausalLM"}
DRAFT_MODEL_DRAFTER_TYPES = {"llama": "LlamaForCausalLM"}


@dataclass(frozen=True)
class PairInfo:
    """What `check_pair` read from the two config.json files."""

    target: Path
    drafter: Path | None  # None: a lookup method (ngram) drafts from the token ids, no model
    target_type: str
    drafter_type: str
    target_architecture: str
    drafter_architecture: str
    method: str = "mtp"
    # The target's config.json as checked here: the drafter's loader takes the engine's window from it (a Llama
    # target's attention fields, checked by check_pair) instead of reading the file a second time.
    target_config: dict[str, Any] = field(default_factory=dict, compare=False)


def _local(path: Path) -> Path | None:
    """The folder holding `path`'s config.json: the path itself, or a hub id's snapshot in the Hugging Face
    cache (looked up offline: the reference never downloads weights)."""
    if (path / "config.json").is_file():
        return path
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(str(path), "config.json")
    except ValueError:  # not a valid hub id either
        return None
    return Path(found).parent if isinstance(found, str) else None


def _config(path: Path, role: str) -> tuple[Path, dict[str, Any]]:
    local = _local(path)
    if local is None:
        raise UserError(
            f"{path}: the {role} has no config.json here or in the Hugging Face cache (the reference needs its "
            "weights on this host)"
        )
    cfg = local / "config.json"
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{cfg}: unreadable ({exc})") from exc
    if not isinstance(data, dict):
        raise UserError(f"{cfg}: not a JSON object")
    return local, data


def _architecture(data: dict[str, Any]) -> str:
    archs = data.get("architectures") or []
    return str(archs[0]) if archs else str(data.get("model_type") or "unknown")


def check_pair(target: str | Path, drafter: str | Path | None, method: str = "mtp") -> PairInfo:
    """Refuse, in one line naming it, a method or pair the reference does not model (exit 2)."""
    if method not in MODEL_METHODS + LOOKUP_METHODS:
        raise UserError(
            f"speculative method {method!r}: the reference replays {', '.join(MODEL_METHODS + LOOKUP_METHODS)} "
            "(Gemma4 and DeepSeek MTP, a Llama draft model, EAGLE-1 and EAGLE-3 on Llama, n-gram and suffix "
            "lookup); it does not model this method's draft rule"
        )
    target, drafter_path = Path(target), Path(drafter) if drafter else None
    if method == "draft_model":
        return _check_draft_model_pair(target, drafter_path)
    target, t = _config(target, "target")
    t_type, t_arch = str(t.get("model_type") or ""), _architecture(t)
    if t_type not in METHOD_TARGETS[method]:
        names = sorted(TARGET_TYPES[t] for t in METHOD_TARGETS[method])
        raise UserError(
            f"{target}: the reference models method {method} over {', '.join(names)} targets; "
            f"this target is {t_arch} (model_type {t_type or 'unset'})"
        )
    if method in LOOKUP_METHODS:
        # The lookup needs no drafter; one given is not what the engine drafted with, so it is not read.
        _check_windows(target, t)
        return PairInfo(target, None, t_type, "", t_arch, method, method, t)
    if drafter_path is None and t_type == DEEPSEEK_TYPE:
        # vLLM's method mtp with no draft model reads the next-token layer from the target's own checkpoint.
        drafter_path = target
    if drafter_path is None:
        raise UserError(
            f"{target}: the reference needs a draft model (a gemma4_assistant MTP drafter); the run has none"
        )
    drafter_path, d = _config(drafter_path, "drafter")
    d_type, d_arch = str(d.get("model_type") or ""), _architecture(d)
    if t_type == DEEPSEEK_TYPE or d_type == DEEPSEEK_TYPE:
        return _deepseek_pair(target, t, drafter_path, d)
    if method == "eagle3":
        if d_arch != EAGLE3_ARCHITECTURE or not d.get("eagle_aux_hidden_state_layer_ids"):
            raise UserError(
                f"{drafter_path}: the reference models a {EAGLE3_ARCHITECTURE} head naming its "
                f"eagle_aux_hidden_state_layer_ids; this drafter is {d_arch}"
            )
        _check_windows(target, t)
        return PairInfo(target, drafter_path, t_type, d_type, t_arch, d_arch, method, t)
    if method == "eagle":
        _check_eagle1_head(drafter_path, d, t)
        _check_windows(target, t)
        return PairInfo(target, drafter_path, t_type, d_type, t_arch, d_arch, method, t)
    if d_type not in DRAFTER_TYPES:
        raise UserError(
            f"{drafter_path}: the reference models the gemma4_assistant MTP drafter (Gemma4AssistantForCausalLM); "
            f"this drafter is {d_arch} (model_type {d_type or 'unset'})"
        )
    return PairInfo(target, drafter_path, t_type, d_type, t_arch, d_arch, method, t)


def _check_windows(
    target: Path, t: dict[str, Any], drafter: Path | None = None, d: dict[str, Any] | None = None
) -> None:
    """A Llama target's (and draft model's) attention fields, checked here so that a malformed one is one line
    before any model loads (sliding_llama.window_of: the windows vLLM gives their layers)."""
    if str(t.get("model_type") or "") != "llama":
        return
    from mtpbench.reference import sliding_llama

    for path, config, beside in ((target, t, None), (drafter, d, t)):
        if path is None or config is None:
            continue
        try:
            sliding_llama.window_of(config, beside)
        except ValueError as exc:
            raise UserError(f"{path / 'config.json'}: {exc}") from None


def _check_eagle1_head(drafter: Path, d: dict[str, Any], t: dict[str, Any]) -> None:
    """An EAGLE-1 head the reference models: a one-layer Llama config (vLLM runs it as EagleLlamaForCausalLM)
    of the target's width, so that it reads the target's embeddings and lm_head (llama_eagle.py)."""
    d_arch = _architecture(d)
    if str(d.get("model_type") or "") != "llama" or d_arch not in (EAGLE1_ARCHITECTURE, f"Eagle{EAGLE1_ARCHITECTURE}"):
        raise UserError(
            f"{drafter}: the reference models an EAGLE-1 head with a Llama config ({EAGLE1_ARCHITECTURE}); "
            f"this drafter is {d_arch} (model_type {d.get('model_type') or 'unset'})"
        )
    layers, width, target_width = d.get("num_hidden_layers"), d.get("hidden_size"), t.get("hidden_size")
    if layers != 1 or width != target_width:
        raise UserError(
            f"{drafter}: the reference models a one-layer EAGLE-1 head as wide as its target ({target_width}); "
            f"this head has {layers} layers of width {width}"
        )


def _deepseek_pair(target: Path, t: dict[str, Any], drafter: Path, d: dict[str, Any]) -> PairInfo:
    """A DeepSeek target and the checkpoint vLLM's deepseek_mtp reads its one MTP layer from."""
    t_type, d_type = str(t.get("model_type") or ""), str(d.get("model_type") or "")
    if t_type != DEEPSEEK_TYPE or d_type != DEEPSEEK_TYPE:
        raise UserError(
            f"{drafter}: the reference models DeepSeek MTP on a deepseek_v3 target with a deepseek_v3 checkpoint "
            f"holding its next-token layer; this pair is {t_type or 'unset'} + {d_type or 'unset'}"
        )
    layers = int(d.get("num_nextn_predict_layers") or 0)
    if layers != 1:
        raise UserError(
            f"{drafter}: num_nextn_predict_layers is {layers}; the reference models exactly one MTP layer "
            "(vLLM chains it k times)"
        )
    return PairInfo(target, drafter, t_type, d_type, _architecture(t), "DeepSeekMTPModel", "mtp", t)


def _check_draft_model_pair(target: Path, drafter: Path | None) -> PairInfo:
    """The draft-model method's pair: a Llama target and a Llama draft model (refused in one line otherwise)."""
    target, t = _config(target, "target")
    t_type, t_arch = str(t.get("model_type") or ""), _architecture(t)
    if t_type not in DRAFT_MODEL_TARGET_TYPES:
        raise UserError(
            f"{target}: the reference models draft_model runs on {', '.join(DRAFT_MODEL_TARGET_TYPES.values())} "
            f"targets; this target is {t_arch} (model_type {t_type or 'unset'})"
        )
    if drafter is None:
        raise UserError(f"{target}: the reference needs the run's draft model; the run names none")
    drafter, d = _config(drafter, "drafter")
    d_type, d_arch = str(d.get("model_type") or ""), _architecture(d)
    if d_type not in DRAFT_MODEL_DRAFTER_TYPES:
        raise UserError(
            f"{drafter}: the reference models {', '.join(DRAFT_MODEL_DRAFTER_TYPES.values())} draft models; "
            f"this drafter is {d_arch} (model_type {d_type or 'unset'})"
        )
    _check_windows(target, t, drafter, d)
    return PairInfo(target, drafter, t_type, d_type, t_arch, d_arch, "draft_model", t)


@dataclass
class Pair:
    """The loaded pair: the target's text model and head, the drafter (None for a lookup method), and how
    they were loaded."""

    info: PairInfo
    target: Any  # Gemma4ForCausalLM, Gemma4ForConditionalGeneration or LlamaForCausalLM
    text: Any  # the target's text model (Gemma4TextModel, LlamaModel)
    head: Any  # the target's lm_head
    assistant: Any  # Gemma4AssistantForCausalLM, a LlamaForCausalLM draft model, or None (a lookup method)
    tokenizer: Any
    dtype: str
    device: str
    stop_ids: frozenset[int]


def load_pair(info: PairInfo, dtype: str = "float32", device: str = "cpu", tokenizer: str | None = None) -> Pair:
    """Load both models in `dtype` on `device` (the engine's dtype: the numerics the counts are held to)."""
    from transformers import AutoTokenizer, GenerationConfig

    torch_dtype = _torch_dtype(dtype)
    if info.target_type == DEEPSEEK_TYPE:
        return _load_deepseek(info, torch_dtype, dtype, device, tokenizer)
    from transformers.utils import logging as transformers_logging

    # transformers draws a tqdm bar per model it loads ("Loading weights"), on stderr beside the replay's
    # own progress: off while the pair loads, as the user had it after.
    bars_were_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        target = _load_target(info, torch_dtype).to(device)
        assistant = None if info.drafter is None else _load_drafter(info, torch_dtype, device, target.lm_head)
    except (OSError, ValueError, RuntimeError) as exc:
        raise UserError(f"{info.target}: transformers could not load the pair ({exc})") from exc
    finally:
        if bars_were_on:
            transformers_logging.enable_progress_bar()
    text = target.model.language_model if info.target_type == "gemma4" else target.model
    tok = AutoTokenizer.from_pretrained(str(tokenizer or info.target))
    stops: set[int] = set()
    try:
        gen = GenerationConfig.from_pretrained(str(info.target))
        stops |= _ids(gen.eos_token_id)
    except OSError:
        pass
    stops |= _ids(getattr(target.config, "eos_token_id", None))
    stops |= _ids(getattr(target.config.get_text_config(), "eos_token_id", None))
    stops |= _ids(tok.eos_token_id)
    return Pair(info, target, text, target.lm_head, assistant, tok, dtype, device, frozenset(stops))


def _load_target(info: PairInfo, torch_dtype: torch.dtype) -> Any:
    """A Gemma4 or Llama target in eval mode."""
    if info.target_type == "llama":
        from mtpbench.reference import sliding_llama

        # Its sliding twin where the config's layers slide: transformers' LlamaForCausalLM ignores them.
        return sliding_llama.load(info.target, torch_dtype)
    if info.target_type == "gemma4":
        from transformers import Gemma4ForConditionalGeneration as TargetClass
    else:
        from transformers import Gemma4ForCausalLM as TargetClass
    return TargetClass.from_pretrained(str(info.target), dtype=torch_dtype).eval()


def _load_deepseek(info: PairInfo, torch_dtype: torch.dtype, dtype: str, device: str, tokenizer: str | None) -> Pair:
    """transformers' `DeepseekV3ForCausalLM` (it ignores the MTP layer's tensors) and that layer, read by name
    from the drafter checkpoint's safetensors as vLLM reads it (`model.layers.{num_hidden_layers}.*`)."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, DeepseekV3ForCausalLM
    from transformers.utils import logging as transformers_logging

    from mtpbench.reference.deepseek_mtp import mtp_layer_class

    assert info.drafter is not None  # check_pair gives a DeepSeek pair its checkpoint
    verbosity = transformers_logging.get_verbosity()
    bars_were_on = transformers_logging.is_progress_bar_enabled()
    # The MTP layer's tensors are "unexpected" to transformers' class: its warning would only say so. The
    # loading bar is off as in load_pair.
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        target = DeepseekV3ForCausalLM.from_pretrained(str(info.target), dtype=torch_dtype).to(device).eval()
        tensors: dict[str, Any] = {}
        for shard in sorted(info.drafter.glob("*.safetensors")):
            tensors.update(load_file(str(shard)))
        mtp = mtp_layer_class()(target.config).to(torch_dtype)
        mtp.load_vllm_state_dict(tensors, int(target.config.num_hidden_layers))
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise UserError(f"{info.target}: could not load the DeepSeek target and its MTP layer ({exc})") from exc
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars_were_on:
            transformers_logging.enable_progress_bar()
    mtp = mtp.to(device).eval()
    tok = AutoTokenizer.from_pretrained(str(tokenizer or info.target))
    stops = _ids(getattr(target.config, "eos_token_id", None)) | _ids(tok.eos_token_id)
    return Pair(info, target, target.model, target.lm_head, mtp, tok, dtype, device, frozenset(stops))


def _load_drafter(info: PairInfo, torch_dtype: torch.dtype, device: str, target_head: Any) -> Any:
    """The drafter: the Gemma4 MTP assistant or a Llama draft model through transformers, or an EAGLE-3 or
    EAGLE-1 head as mtpbench/reference/eagle.py's module (transformers has no EAGLE class; EAGLE-1 scores with
    the target's `target_head`, as vLLM shares it). A Llama target's engine window reaches the drafter's
    attention as vLLM passes it on (sliding_llama.engine_window)."""
    assert info.drafter is not None
    from mtpbench.reference import sliding_llama

    target_config = info.target_config if info.target_type == "llama" else {}
    window = sliding_llama.engine_window(target_config)
    if info.method == "eagle3":
        from mtpbench.reference.eagle import load_head

        return load_head(info.drafter, torch_dtype, device, window)
    if info.method == "eagle":
        from mtpbench.reference.eagle import load_eagle1_head

        return load_eagle1_head(info.drafter, target_head, torch_dtype, device, window)
    if info.drafter_type == "llama":  # the draft-model method's drafter: a causal LM of its own
        return sliding_llama.load(info.drafter, torch_dtype, target_config).to(device)
    from transformers import Gemma4AssistantForCausalLM

    return Gemma4AssistantForCausalLM.from_pretrained(str(info.drafter), dtype=torch_dtype).to(device).eval()


def _ids(value: Any) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, (list, tuple, set)):
        return {int(v) for v in value}
    return {int(value)}


def _torch_dtype(name: str) -> torch.dtype:
    import torch

    table = {
        "float32": torch.float32,
        "float": torch.float32,
        "bfloat16": torch.bfloat16,
        "float16": torch.float16,
        "half": torch.float16,
    }
    key = name.removeprefix("torch.")
    if key not in table:
        raise UserError(f"dtype {name!r}: the reference runs float32, bfloat16 or float16")
    return table[key]


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    import torch

    previous = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
