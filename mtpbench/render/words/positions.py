"""The two per-position acceptance definitions (vllm#39359), named the same in every renderer.

vLLM's per-position acceptance rate is unconditional: tokens accepted at draft position i over draft steps
(`num_accepted_tokens_per_pos[i] / num_drafts`), so it can only fall along the positions. Papers and
vllm#39359 also quote the conditional rate: accepted at i over accepted at i−1, the chance that position i
is accepted once every earlier one was; at pos0 the two are the same number. A reader comparing against a
published figure must know which one a column holds, so every table and the JSON say it.
"""

from __future__ import annotations

UNCONDITIONAL = "uncond"
CONDITIONAL = "cond"

UNCONDITIONAL_DEFINITION = "accepted at position i / draft steps (vLLM's per-position acceptance rate)"
CONDITIONAL_DEFINITION = "accepted at position i / accepted at position i-1 (pos0: / draft steps)"

# One line under every table that carries both (console, Markdown, HTML).
POSITIONS_NOTE = (
    f"pos i % {UNCONDITIONAL} = unconditional: {UNCONDITIONAL_DEFINITION}; "
    f"pos i % {CONDITIONAL} = conditional: {CONDITIONAL_DEFINITION}"
)

# The JSON's key -> definition, beside the figures (Summary.per_pos and Summary.conditional).
DEFINITIONS = {
    "per_pos": f"unconditional: {UNCONDITIONAL_DEFINITION}",
    "conditional": f"conditional: {CONDITIONAL_DEFINITION}",
}


def unconditional_title(i: int) -> str:
    return f"pos{i} % {UNCONDITIONAL}"


def conditional_title(i: int) -> str:
    return f"pos{i} % {CONDITIONAL}"
