"""Named patches a worker applies to vLLM before its engine starts (the config's `variants` axis).

A variant is a list of patch names. Each name maps to `module:function` below; the function takes no
arguments, patches the already-importable vLLM (or vllm-ascend) in this process and returns one line
saying what it changed. It raises `PatchNotApplicable` (one-line reason) when the build lacks the code it
targets or already behaves as the patch would: the patch then changes nothing and the reason is recorded.
Patches must be idempotent (the vLLM plugin hook and the worker may both ask for the same one).

This module is imported by the worker inside the *build's* interpreter: standard library only at module
level, patch modules imported lazily.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import asdict, dataclass

# The environment variable through which the runner (or a user) asks for patches: comma-separated names.
# Read by the worker and by the `vllm.general_plugins` entry point (mtpbench.plugin).
PATCHES_ENV = "MTPBENCH_PATCHES"


class PatchNotApplicable(Exception):
    """The build does not have what the patch targets, or already has the behaviour; nothing changed."""


# name -> "module:function". The fault reproduces the vllm-ascend flattening bug on any build with the
# Gemma4 MTP proposer; the fix is the per-layer parameter resolution for vllm-ascend graph mode; the
# synthetic sampler lets the CPU engine accept drafts at configured rates (the gate's calibration); the
# expand kernel makes sampled (temperature > 0) spec decode on the CPU engine use the request's temperature.
REGISTRY: dict[str, str] = {
    "flatten-draft-metadata": "mtpbench.patches.flatten:apply",
    "cpu-synthetic-rejection": "mtpbench.patches.synthetic:apply",
    "cpu-expand-kernel": "mtpbench.patches.expand:apply",
    "ascend-gemma4-layer-params": "mtpbench.fixes.ascend_gemma4:apply",
    # A fault that only a long-lived engine shows (drafts perturbed after N requests): the soak's `drift`.
    "drift-after-requests": "mtpbench.patches.drift:apply",
    # A probe, not a patch: changes nothing, records which KV-cache group each draft layer read.
    "metadata-binding": "mtpbench.patches.binding:apply",
    # A probe: counts the drafter's graph captures and replays (the proof that graph mode ran the draft).
    "graph-replay": "mtpbench.patches.replay:apply",
}


@dataclass
class PatchOutcome:
    name: str
    status: str  # "applied" | "not-applicable" | "failed"
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def apply_one(name: str) -> PatchOutcome:
    target = REGISTRY.get(name)
    if target is None:
        return PatchOutcome(name, "failed", f"unknown patch {name!r}; known: {', '.join(sorted(REGISTRY))}")
    module_name, func_name = target.split(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        return PatchOutcome(name, "applied", str(func()))
    except PatchNotApplicable as exc:
        return PatchOutcome(name, "not-applicable", str(exc))
    except Exception as exc:
        return PatchOutcome(name, "failed", f"{type(exc).__name__}: {exc}")


def apply_all(names: list[str]) -> list[PatchOutcome]:
    return [apply_one(n) for n in names]


def observations(names: list[str]) -> dict[str, dict[str, object]]:
    """What applied patches saw while the engine ran (a patch module may define `observations()`)."""
    out: dict[str, dict[str, object]] = {}
    for name in names:
        target = REGISTRY.get(name)
        if target is None:
            continue
        module = importlib.import_module(target.split(":")[0])
        func = getattr(module, "observations", None)
        if callable(func):
            try:
                out[name] = dict(func())
            except Exception as exc:  # an observation must never fail a measured cell
                out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def requested_from_env(env: dict[str, str] | None = None) -> list[str]:
    raw = (os.environ if env is None else env).get(PATCHES_ENV, "")
    return [n.strip() for n in raw.split(",") if n.strip()]
