"""What a patch promises and how one is asked for: `PatchNotApplicable` and the `MTPBENCH_PATCHES` variable.

A patch (mtpbench/patches/*, mtpbench/fixes/ascend_gemma4.py) is a module with `apply()`: it patches the
already-importable vLLM (or vllm-ascend) in this process and returns one line saying what it changed, or
raises `PatchNotApplicable` (one-line reason) when the build lacks the code it targets or already behaves
as the patch would; the patch then changes nothing and the reason is recorded. Patches are idempotent
(the vLLM plugin hook and the worker may both ask for the same one).

This is the leaf every patch and fix imports: it imports nothing of mtpbench, so the registry that names
the patches (mtpbench/fixes/registry.py) can import them without a circle. Standard library only: it is
imported inside the *build's* interpreter.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from typing import Any

# The environment variable through which the runner (or a user) asks for patches: comma-separated names.
# Read by the worker and by the `vllm.general_plugins` entry point (mtpbench.plugin).
PATCHES_ENV = "MTPBENCH_PATCHES"


class PatchNotApplicable(Exception):
    """The build does not have what the patch targets, or already has the behaviour; nothing changed."""


def class_method(module: str, cls: str, method: str, what: str) -> tuple[type, Callable[..., Any]]:
    """The class a patch rewraps and the method as it is now (already wrapped, maybe: check the marker), or
    `PatchNotApplicable` naming `what` the build lacks (e.g. "Gemma4 MTP proposer")."""
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        raise PatchNotApplicable(f"no {what} in this vLLM ({module}: {exc})") from exc
    owner = getattr(found, cls, None)
    if not isinstance(owner, type):
        raise PatchNotApplicable(f"{module} has no {cls}")
    current = getattr(owner, method, None)
    if not callable(current):
        raise PatchNotApplicable(f"{module}.{cls} has no {method}")
    return owner, current


def requested_from_env(env: Mapping[str, str] | None = None) -> list[str]:
    """The patch names `MTPBENCH_PATCHES` asks for (this process's environment unless `env` is given)."""
    raw = (os.environ if env is None else env).get(PATCHES_ENV, "")
    return [n.strip() for n in raw.split(",") if n.strip()]
