"""runs/<id>/reference.jsonl: the acceptance the weights say each prompt should have (mtpbench/reference/),
stored beside the run and never in records.jsonl, which stays the engine's alone.

Append-only, one JSON object a line, every line with `schema`: a `reference_start` line per replay session
(what was replayed: the target and drafter folders and architectures, dtype, device, torch, transformers and
mtpbench versions, k, max_tokens, max_model_len), then one `reference` line per prompt per cell as each prompt
is replayed, then a `reference_end` line with the session's wall and CPU seconds and its draft steps. A second
session appends; readers take the last complete session (`read_reference`), so a replay cut short never
mixes with a finished one.

Format history: 1 (mtpbench 0.1, issue 29): as above.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtpbench.errors import UserError
from mtpbench.schema import SCHEMA_VERSION, schema_problem

REFERENCE = "reference.jsonl"


@dataclass(frozen=True)
class ReferencePrompt:
    """One prompt of one cell as the weights say the engine should count it."""

    cell: str
    prompt_id: str
    num_prompt_tokens: int
    num_generated_tokens: int
    finish_reason: str
    output_sha256: str
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]
    steps: tuple[int, ...]  # accepted drafts of each draft step, in order
    target_margin: float
    draft_margin: float
    teacher_forced_mismatches: int

    def to_json(self, session: str) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "type": "reference",
            "session": session,
            "cell": self.cell,
            "prompt_id": self.prompt_id,
            "num_prompt_tokens": self.num_prompt_tokens,
            "num_generated_tokens": self.num_generated_tokens,
            "finish_reason": self.finish_reason,
            "output_sha256": self.output_sha256,
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_pos": list(self.accepted_per_pos),
            "steps": list(self.steps),
            "target_margin": _finite(self.target_margin),
            "draft_margin": _finite(self.draft_margin),
            "teacher_forced_mismatches": self.teacher_forced_mismatches,
        }


def _finite(x: float) -> float | None:
    # JSON has no infinity: a prompt with no draft decision has no margin.
    return round(x, 6) if x == x and abs(x) != float("inf") else None


@dataclass
class ReferenceFile:
    """The last complete session of a run's reference.jsonl."""

    path: Path
    session: str
    replayed: dict[str, Any]
    prompts: list[ReferencePrompt] = field(default_factory=list)
    wall_s: float | None = None
    cpu_s: float | None = None  # the replay's process CPU time (the wall on a shared box is the neighbours' too)
    drafts: int | None = None  # draft steps replayed: the cost is quoted per 1,000 of them

    def by_cell(self) -> dict[str, dict[str, ReferencePrompt]]:
        out: dict[str, dict[str, ReferencePrompt]] = {}
        for p in self.prompts:
            out.setdefault(p.cell, {})[p.prompt_id] = p
        return out


def append_lines(run_dir: Path, lines: list[dict[str, Any]]) -> None:
    """Append whole lines and flush them to disk (a crash loses at most the lines being written)."""
    import os

    data = "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines).encode()
    with open(run_dir / REFERENCE, "ab") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _prompt(rec: dict[str, Any]) -> ReferencePrompt:
    def margin(key: str) -> float:
        v = rec.get(key)
        return float("inf") if v is None else float(v)

    return ReferencePrompt(
        cell=str(rec["cell"]),
        prompt_id=str(rec["prompt_id"]),
        num_prompt_tokens=int(rec["num_prompt_tokens"]),
        num_generated_tokens=int(rec["num_generated_tokens"]),
        finish_reason=str(rec["finish_reason"]),
        output_sha256=str(rec["output_sha256"]),
        num_drafts=int(rec["num_drafts"]),
        num_draft_tokens=int(rec["num_draft_tokens"]),
        num_accepted_tokens=int(rec["num_accepted_tokens"]),
        accepted_per_pos=tuple(int(x) for x in rec["accepted_per_pos"]),
        steps=tuple(int(x) for x in rec.get("steps") or ()),
        target_margin=margin("target_margin"),
        draft_margin=margin("draft_margin"),
        teacher_forced_mismatches=int(rec.get("teacher_forced_mismatches") or 0),
    )


def read_reference(run_dir: Path) -> ReferenceFile | None:
    """The last complete session, or None when the run has no reference (or none finished)."""
    path = run_dir / REFERENCE
    if not path.is_file():
        return None
    sessions: dict[str, ReferenceFile] = {}
    done: list[str] = []
    for n, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            # A crash mid-write cuts the last line: its session never ends, so it is never read.
            continue
        if not isinstance(rec, dict):
            raise UserError(f"{path}:{n}: not a JSON object")
        problem = schema_problem(rec.get("schema"), SCHEMA_VERSION, "reference")
        if problem:
            raise UserError(f"{path}:{n}: {problem}")
        session = str(rec.get("session"))
        kind = rec.get("type")
        try:
            if kind == "reference_start":
                sessions[session] = ReferenceFile(path, session, dict(rec.get("replayed") or {}))
            elif kind == "reference" and session in sessions:
                sessions[session].prompts.append(_prompt(rec))
            elif kind == "reference_end" and session in sessions:
                ended = sessions[session]
                ended.wall_s = float(rec["wall_s"]) if rec.get("wall_s") is not None else None
                ended.cpu_s = float(rec["cpu_s"]) if rec.get("cpu_s") is not None else None
                ended.drafts = int(rec["drafts"]) if rec.get("drafts") is not None else None
                done.append(session)
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{path}:{n}: bad {kind} line ({exc!r})") from None
    return sessions[done[-1]] if done else None
