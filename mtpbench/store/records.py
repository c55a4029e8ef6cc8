"""records.jsonl: the typed model of every record (`PromptRecord`, `CellStart`, `CellEnd`, `TornMark`) and
the bounds they share with the manifest, the counts no speculative decoder can produce (`count_problem`),
the one reader (`scan_records`) and the line format of a record (`dump_record`, the worker's compact JSON,
used by the store's RunWriter). The file is append-only, written by the workers as prompts finish
(`engine/records.append_record`: one locked, complete write per line). A crash mid-write leaves a truncated last
line: it is reported and skipped, and the next append marks it with a `torn` record so it stays readable
once lines follow it. Anything else unreadable is a `UserError` naming the file, line and key; records of
another schema are refused (results.py keeps the format history).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from mtpbench.errors import UserError
from mtpbench.schema import PROMPT_FRAME_COLUMNS, SCHEMA_VERSION, schema_problem

RECORDS = "records.jsonl"

PROMPT_COLUMNS = list(PROMPT_FRAME_COLUMNS)  # schema.py names them, from PromptRecord's fields

# Bounds that no real run comes near, so that 10**30 or a bool is a typed error, not a silent number:
# counts stay exact as JSON numbers (2**53), repeats and PYTHONHASHSEED within what the runner can set.
MAX_COUNT = 2**53
Count = Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]
RepeatIndex = Annotated[StrictInt, Field(ge=0, le=10_000)]
HashSeed = Annotated[StrictInt, Field(ge=0, le=4294967295)]
Attempt = Annotated[StrictInt, Field(ge=1, le=10_000)]  # --resume re-runs a repeat as attempt 2, 3, …
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


# --- typed models of what is on disk --------------------------------------------------------------------
# Unknown keys are kept (extra="allow"): newer writers of the same schema may add fields; what is read
# here is checked for type and range.


class OnDisk(BaseModel):
    """A model of something read from a run folder (the manifest's parts and every record)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class Counts(OnDisk):
    num_drafts: Count
    num_draft_tokens: Count
    num_accepted_tokens: Count
    accepted_per_pos: list[Count] = Field(max_length=64)


def count_problem(c: Counts, k: int | None) -> str | None:
    """Why these counts cannot come from a speculative decoder with k draft tokens, or None.

    Acceptance is a prefix (position i is accepted only if 0..i-1 were), so accepted_per_pos is
    non-increasing and its first entry at most num_drafts; every accepted token was drafted, and a draft
    proposes at most k tokens."""
    pos = c.accepted_per_pos
    if k is not None and len(pos) != k:
        return f"accepted_per_pos: {len(pos)} positions, but k is {k}"
    # One pass (this runs for every record of every run that is read).
    prev, total = c.num_drafts, 0
    for i, a in enumerate(pos):
        if a > prev:
            if i == 0:
                return f"accepted_per_pos: {a} accepted at position 0 but only {c.num_drafts} drafts"
            return f"accepted_per_pos: {pos} grows with the position (acceptance is a prefix: it cannot)"
        prev, total = a, total + a
    if total != c.num_accepted_tokens:
        return f"num_accepted_tokens: {c.num_accepted_tokens}, but accepted_per_pos sums to {total}"
    if c.num_accepted_tokens > c.num_draft_tokens:
        return f"num_accepted_tokens: {c.num_accepted_tokens} accepted of {c.num_draft_tokens} draft tokens"
    kk = k if k is not None else len(pos)
    if c.num_draft_tokens > kk * c.num_drafts:
        return f"num_draft_tokens: {c.num_draft_tokens} draft tokens in {c.num_drafts} drafts of k={kk}"
    return None


class RecordBase(OnDisk):
    schema_version: StrictInt = Field(alias="schema")
    type: str = Field(min_length=1)
    cell: str = Field(min_length=1)
    repeat: RepeatIndex
    build: str | None = None
    mode: str | None = None
    variant: str | None = None
    hash_seed: HashSeed | None = None
    attempt: Attempt | None = None


class PromptRecord(RecordBase, Counts):
    type: Literal["prompt"]
    prompt_id: str = Field(min_length=1)
    prompt_index: Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)] | None = None
    output_sha256: str = Field(min_length=1)
    num_generated_tokens: Count | None = None
    wall_s: Seconds | None = None
    per_request: Counts | None = None
    round: RepeatIndex | None = None  # a soak round (engine/soak.py); offline and serving records have none
    uptime_s: Seconds | None = None


class RoundEnd(RecordBase):
    """A soak round's end (engine/soak.py): its wall time, whether it stalled past its deadline, and what
    the engine's metrics said (null where this vLLM does not expose them)."""

    type: Literal["round_end"]
    round: RepeatIndex
    set: str | None = None
    prompts: Count | None = None
    wall_s: Seconds | None = None
    deadline_s: Seconds | None = None
    stalled: StrictBool = False
    unfinished: list[str] = Field(default_factory=list)
    uptime_s: Seconds | None = None
    kv_cache_usage_max: Annotated[float, Field(ge=0, le=1.5, allow_inf_nan=False)] | None = None


class CellStart(RecordBase):
    type: Literal["cell_start"]
    requested: dict[str, Any] = Field(default_factory=dict)
    effective: dict[str, Any] = Field(default_factory=dict)
    patches: list[Any] = Field(default_factory=list)
    engine_start_s: Seconds | None = None


class CellEnd(RecordBase):
    type: Literal["cell_end"]
    wall_s: Seconds | None = None
    engine_start_s: Seconds | None = None


TORN = "torn"


class TornMark(OnDisk):
    """Written by engine/records.append_record right after a line that a crash cut off (of any cell), so that the
    cut-off line, now in the middle of the file, is still told apart from garbage."""

    schema_version: StrictInt = Field(alias="schema")
    type: Literal["torn"]
    bytes: Count | None = None


# Records of other types (added by newer writers of the same schema) are checked against RecordBase.
RECORD_MODELS: dict[str, type[OnDisk]] = {
    "prompt": PromptRecord,
    "cell_start": CellStart,
    "cell_end": CellEnd,
    TORN: TornMark,
    "round_end": RoundEnd,
}


def first_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as `key.path: message` (what the readers' UserErrors name)."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        msg = "missing"
    return f"{loc}: {msg}"


def dump_record(record: Mapping[str, Any]) -> str:
    """One record as records.jsonl holds it: compact JSON on one line (the worker's format, engine/worker.py)."""
    return json.dumps(record, separators=(",", ":")) + "\n"


@dataclass
class Records:
    records: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)


def _parse_line(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return _UNPARSABLE


_UNPARSABLE = object()


def _check_record(where: str, rec: Any, k: int | Mapping[str, int] | None) -> dict[str, Any]:
    if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
        raise UserError(f"{where}: not a mtpbench record (no 'type')")
    problem = schema_problem(rec.get("schema"), SCHEMA_VERSION, "record")
    if problem:
        raise UserError(f"{where}: {problem}")
    model = RECORD_MODELS.get(rec["type"], RecordBase)
    try:
        parsed = model.model_validate(rec)
    except ValidationError as exc:
        raise UserError(f"{where}: {rec['type']} record: {first_error(exc)}") from None
    if isinstance(parsed, PromptRecord):
        # A k sweep checks each record against its own cell's k (a cell the manifest lacks: its width alone).
        cell_k = k.get(str(rec.get("cell"))) if isinstance(k, Mapping) else k
        for key, counts in (("", parsed), ("per_request.", parsed.per_request)):
            why = count_problem(counts, cell_k) if counts is not None else None
            if why:
                raise UserError(f"{where}: impossible counts: {key}{why}")
    return rec


def scan_records(path: Path, k: int | Mapping[str, int] | None = None, run_id: str | None = None) -> Records:
    """Every record of a records.jsonl, validated; a last line cut off by a crash (and any line a `torn`
    record marks as such) is skipped with a warning, anything else unreadable is a UserError. So is a
    record of another run (`run_id`, when given) and a prompt recorded twice in one attempt of a repeat:
    the worker appends each prompt once, so a second copy means the file was concatenated or copied into,
    and counting it (or keeping one copy silently) would judge evidence nobody can vouch for."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: records file not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: records file is a folder") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read records: {exc.strerror or exc}") from None
    out = Records([])
    seen: dict[tuple[Any, ...], int] = {}
    lines = raw.split(b"\n")
    parsed = [_parse_line(line) if line.strip() else None for line in lines]
    for n, (line, rec) in enumerate(zip(lines, parsed, strict=True), start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        if rec is _UNPARSABLE:
            last = n == len(lines) and not raw.endswith(b"\n")
            marked = n < len(parsed) and isinstance(parsed[n], dict) and parsed[n].get("type") == TORN
            if last or marked:
                out.warnings.append(f"{where}: ignored a line cut off by a crash ({len(line)} bytes)")
                continue
            raise UserError(f"{where}: corrupt JSON (not a record)")
        checked = _check_record(where, rec, k)
        if checked["type"] == TORN:
            continue
        if run_id is not None and checked.get("run_id") not in (None, run_id):
            raise UserError(
                f"{where}: a record of run {checked['run_id']!r} in run {run_id!r}: records of two "
                "runs cannot be judged as one"
            )
        if checked["type"] == "prompt":
            # A soak repeat sends its prompts once per round (`round`, engine/soak.py): once per round each.
            key = (
                checked.get("cell"),
                checked.get("repeat"),
                checked.get("attempt", 1),
                checked.get("prompt_id"),
                checked.get("round", 0),
            )
            if key in seen:
                where_round = f" round {key[4]}" if "round" in checked else ""
                raise UserError(
                    f"{where}: prompt {key[3]!r} of {key[0]} repeat {key[1]}{where_round} (attempt {key[2]}) is "
                    "recorded again "
                    f"(first at line {seen[key]}): each prompt is appended once, so the file was concatenated "
                    "or copied into"
                )
            seen[key] = n
        out.records.append(checked)
    return out


def read_records(path: Path, k: int | None = None) -> list[dict[str, Any]]:
    return scan_records(path, k).records
