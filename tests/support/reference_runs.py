"""Constructed references for the reference's tests (judge, CLI): a run's reference.jsonl written in the real
format (store/reference_records.py), and per-prompt engine counts that add up with a 128-token text."""

from __future__ import annotations

from pathlib import Path

from mtpbench.store.reference_records import ReferencePrompt, append_lines
from tests.support.synthetic_runs import PROMPTS

CELL = "current/eager/stock"
# 128 tokens: 32 steps that accept all 3 drafts (32 × 4 = 128, plus the prefill's token: 129 ≥ 128).
GOOD = (32, [32, 32, 32])
# 40 steps accepting 88 drafts: 88 + 40 + 1 = 129 tokens, as many as GOOD produces (the same text).
WORSE = (40, [36, 28, 24])


def write_reference(
    run: Path,
    cells: list[str],
    counts: tuple[int, list[int]] | dict[str, tuple[int, list[int]]] = GOOD,
    sha: str = "same",
    session: str = "s1",
    method: str | None = None,
) -> None:
    """One finished session in `run`'s reference.jsonl: every prompt of `cells` with `counts` (or each cell's
    own, a k sweep's cells having other k) and text `sha` (synthetic_runs.write_run records the text of prompt p
    as "same-p")."""
    lines: list[dict[str, object]] = [
        {
            "schema": 1,
            "type": "reference_start",
            "session": session,
            "replayed": {"device": "cpu", **({"method": method} if method else {})},
        }
    ]
    for cell in cells:
        drafts, per_pos = counts[cell] if isinstance(counts, dict) else counts
        for pid in PROMPTS:
            p = ReferencePrompt(
                cell=cell,
                prompt_id=pid,
                num_prompt_tokens=100,
                num_generated_tokens=128,
                finish_reason="length",
                output_sha256=f"{sha}-{pid}",
                num_drafts=drafts,
                num_draft_tokens=len(per_pos) * drafts,
                num_accepted_tokens=sum(per_pos),
                accepted_per_pos=tuple(per_pos),
                steps=(),
                target_margin=1.0,
                draft_margin=1.0,
                teacher_forced_mismatches=0,
            )
            lines.append(p.to_json(session))
    lines.append({"schema": 1, "type": "reference_end", "session": session, "wall_s": 1.0})
    append_lines(run, lines)


def per_prompt(*counts: tuple[int, list[int]]) -> list[list[tuple[int, list[int]]]]:
    """synthetic_runs.write_run's per_prompt: one repeat per argument, every prompt with those counts."""
    return [[counts_ for _ in PROMPTS] for counts_ in counts]
