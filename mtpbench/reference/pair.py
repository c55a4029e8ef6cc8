"""The pair the reference replays: which targets and drafters it models (`check_pair`, a one-line refusal
naming anything else, before torch is imported) and how they are loaded (`load_pair`: transformers'
`Gemma4ForCausalLM` or `Gemma4ForConditionalGeneration`'s language model, and `Gemma4AssistantForCausalLM`,
in the engine's dtype on the chosen torch device), with the stop tokens the engine stops at.

Coverage: a target of model_type gemma4_text (`Gemma4ForCausalLM`) or gemma4 (`Gemma4ForConditionalGeneration`,
its language model), drafting by method `mtp` with a drafter of model_type `gemma4_assistant`, or by method
`ngram` with no drafter (mtpbench/reference/ngram.py's lookup); a Llama target (`LlamaForCausalLM`) drafting
by method `eagle3` with a `LlamaForCausalLMEagle3` head (mtpbench/reference/eagle.py) or by `ngram`; the
weights must be on this host (a folder, or the Hugging Face cache for a hub id). Any other method or
architecture, or a method over a target it is not modelled for, is refused: exit 2, one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtpbench.errors import UserError

if TYPE_CHECKING:
    import torch

TARGET_TYPES = {
    "gemma4_text": "Gemma4ForCausalLM",
    "gemma4": "Gemma4ForConditionalGeneration",
    "llama": "LlamaForCausalLM",
}
DRAFTER_TYPES = {"gemma4_assistant": "Gemma4AssistantForCausalLM"}
# The speculative methods whose draft rule the reference replays: a drafter model's, or a lookup's (none).
MODEL_METHODS = ("mtp", "eagle3")
LOOKUP_METHODS = ("ngram",)
# Which targets each drafting method is modelled over (a lookup reads token ids only: any target).
METHOD_TARGETS = {"mtp": ("gemma4_text", "gemma4"), "eagle3": ("llama",), "ngram": tuple(TARGET_TYPES)}
# The EAGLE-3 head's architecture (its config's model_type is plain "llama": the architecture tells it).
EAGLE3_ARCHITECTURE = "LlamaForCausalLMEagle3"


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
            "(Gemma4 MTP, EAGLE-3 on Llama and n-gram lookup); it does not model this method's draft rule"
        )
    target, drafter_path = Path(target), Path(drafter) if drafter else None
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
        return PairInfo(target, None, t_type, "", t_arch, method, method)
    if drafter_path is None:
        raise UserError(
            f"{target}: the reference needs a draft model (a gemma4_assistant MTP drafter); the run has none"
        )
    drafter_path, d = _config(drafter_path, "drafter")
    d_type, d_arch = str(d.get("model_type") or ""), _architecture(d)
    if method == "eagle3":
        if d_arch != EAGLE3_ARCHITECTURE or not d.get("eagle_aux_hidden_state_layer_ids"):
            raise UserError(
                f"{drafter_path}: the reference models a {EAGLE3_ARCHITECTURE} head naming its "
                f"eagle_aux_hidden_state_layer_ids; this drafter is {d_arch}"
            )
        return PairInfo(target, drafter_path, t_type, d_type, t_arch, d_arch, method)
    if d_type not in DRAFTER_TYPES:
        raise UserError(
            f"{drafter_path}: the reference models the gemma4_assistant MTP drafter (Gemma4AssistantForCausalLM); "
            f"this drafter is {d_arch} (model_type {d_type or 'unset'})"
        )
    return PairInfo(target, drafter_path, t_type, d_type, t_arch, d_arch, method)


@dataclass
class Pair:
    """The loaded pair: the target's text model and head, the drafter (None for a lookup method), and how
    they were loaded."""

    info: PairInfo
    target: Any  # Gemma4ForCausalLM or Gemma4ForConditionalGeneration
    text: Any  # the target's Gemma4TextModel
    head: Any  # the target's lm_head
    assistant: Any  # Gemma4AssistantForCausalLM, or None (a lookup method drafts with no model)
    tokenizer: Any
    dtype: str
    device: str
    stop_ids: frozenset[int]


def load_pair(info: PairInfo, dtype: str = "float32", device: str = "cpu", tokenizer: str | None = None) -> Pair:
    """Load both models in `dtype` on `device` (the engine's dtype: the numerics the counts are held to)."""
    from transformers import AutoTokenizer, GenerationConfig

    torch_dtype = _torch_dtype(dtype)
    if info.target_type == "gemma4":
        from transformers import Gemma4ForConditionalGeneration as TargetClass
    elif info.target_type == "llama":
        from transformers import LlamaForCausalLM as TargetClass
    else:
        from transformers import Gemma4ForCausalLM as TargetClass
    from transformers.utils import logging as transformers_logging

    # transformers draws a tqdm bar per model it loads ("Loading weights"), on stderr beside the replay's
    # own progress: off while the pair loads, as the user had it after.
    bars_were_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        target = TargetClass.from_pretrained(str(info.target), dtype=torch_dtype).to(device).eval()
        assistant = None if info.drafter is None else _load_drafter(info, torch_dtype, device)
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


def _load_drafter(info: PairInfo, torch_dtype: torch.dtype, device: str) -> Any:
    """The drafter: the Gemma4 MTP assistant through transformers, or the EAGLE-3 head as
    mtpbench/reference/eagle.py's module (transformers has no EAGLE-3 class)."""
    assert info.drafter is not None
    if info.method == "eagle3":
        from mtpbench.reference.eagle import load_head

        return load_head(info.drafter, torch_dtype, device)
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
