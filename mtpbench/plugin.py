"""vLLM `general_plugins` entry point: applies the patches named in MTPBENCH_PATCHES, and nothing else.

vLLM loads every installed general plugin in every process it starts. Installing mtpbench must never
change a user's vLLM silently, so this hook is inert unless the environment variable asks for a patch.
With it set (e.g. `MTPBENCH_PATCHES=ascend-gemma4-layer-params vllm serve ...`) a user outside mtpbench
gets the same patch a mtpbench variant applies. Standard library only: it runs inside vLLM's process.
"""

from __future__ import annotations

import logging

from mtpbench.patches import PATCHES_ENV, PatchOutcome, apply_all, requested_from_env

logger = logging.getLogger("mtpbench.plugin")


def register() -> list[PatchOutcome]:
    names = requested_from_env()
    if not names:
        return []
    outcomes = apply_all(names)
    for o in outcomes:
        # vLLM's logger is configured by now; one line per patch so `vllm serve` logs show what changed.
        logger.warning("mtpbench %s: %s (%s) [%s]", o.name, o.status, o.detail, PATCHES_ENV)
    return outcomes
