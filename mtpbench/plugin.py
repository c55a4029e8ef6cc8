"""vLLM `general_plugins` entry point: applies the patches named in MTPBENCH_PATCHES, and nothing else.

vLLM loads every installed general plugin in every process it starts. Installing mtpbench must never
change a user's vLLM silently, so this hook is inert unless the environment variable asks for a patch:
without it, it imports nothing but the patch contract (no fix, no registry). With it set (e.g.
`MTPBENCH_PATCHES=ascend-gemma4-layer-params vllm serve ...`) a user outside mtpbench gets the same patch
a mtpbench variant applies, through the same registry. Standard library only: it runs inside vLLM's
process.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mtpbench.patches.contract import PATCHES_ENV, requested_from_env

if TYPE_CHECKING:
    from mtpbench.fixes.registry import PatchOutcome

logger = logging.getLogger("mtpbench.plugin")


def register() -> list[PatchOutcome]:
    names = requested_from_env()
    if not names:
        return []
    from mtpbench.fixes.registry import apply_all

    outcomes = apply_all(names)
    for o in outcomes:
        # vLLM's logger is configured by now; one line per patch so `vllm serve` logs show what changed.
        logger.warning("mtpbench %s: %s (%s) [%s]", o.name, o.status, o.detail, PATCHES_ENV)
    return outcomes
