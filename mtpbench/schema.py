"""The version numbers of mtpbench's file formats, in one place, and the one check that reads them.

Standard library only: the worker (which runs inside a build's interpreter without mtpbench's
dependencies) stamps every record with SCHEMA_VERSION, and results.py / baseline.py refuse files of
another version with a message that says which side is out of date (asv-style: "newer, update mtpbench"
vs "older").

Format history
- run schema 1 (mtpbench 0.1): manifest.json + records.jsonl, see results.py.
- baseline schema 1 (mtpbench 0.1): see baseline.py.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any, Literal, TypedDict

from mtpbench import __version__

SCHEMA_VERSION = 1  # runs: manifest.json and every line of records.jsonl
BASELINE_SCHEMA = 1  # baselines/*.yaml
# A serving cell-repeat whose build returned no per-request spec-decode counts: its acceptance is one pooled
# count of the server's /metrics deltas (mtpbench/engine/serving.py writes it, the evidence stage reads it).
COUNTERS_ONLY = "counters-only"
# Engine features a worker reads back from its engine's config (engine/fingerprint.py effective_config), under
# their engine-argument names: a cell-repeat records each as requested where its mode or config sets it
# (run/cells.py), and the judge warns where the engine ran it otherwise (judge/signals/features.py).
FEATURES_READ_BACK = (
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "max_num_batched_tokens",
    "max_num_seqs",
    "async_scheduling",
    "max_model_len",
)


class _Status(str, Enum):
    """A status written into JSON and shown in words: str() and f-strings give the value ("ok"), never the
    member's name ("CellStatus.OK"), so a status is the same text on disk, in a progress line and in a log."""

    def __str__(self) -> str:
        return str(self.value)


class RunStatus(_Status):
    """Where a whole run stands, in the manifest's `status` (the runner writes it; so do the store's RunWriter
    and the benchmarks' synthetic runs, with the same values)."""

    RUNNING = "running"  # started, or resumed, and not ended (or the runner was killed: --resume finishes it)
    COMPLETE = "complete"  # every cell-repeat ended ok
    FAILED = "failed"  # some cell-repeat failed or timed out (the others went on)
    INTERRUPTED = "interrupted"  # a stop signal, or a bug of the runner, stopped it: every worker is gone


class CellStatus(_Status):
    """Where a cell-repeat stands, in the manifest (the runner writes it, every reader compares with it)."""

    PENDING = "pending"
    RUNNING = "running"
    OK = "ok"  # the worker exited 0 (evidence.py also wants every prompt recorded before it counts it)
    FAILED = "failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"


def schema_problem(value: Any, supported: int, what: str) -> str | None:
    """None when `value` is the supported version, else the sentence that says why the file is refused."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()))
    ):
        shown = "missing" if value is None else f"{value!r}"
        return f"{what} schema: expected an integer version, got {shown[:40]}"
    v = int(value)
    if v == supported:
        return None
    if v > supported:
        return f"{what} schema {v} is newer than mtpbench {__version__} reads ({supported}): update mtpbench to read it"
    return (
        f"{what} schema {v} is older than mtpbench {__version__} reads ({supported}): re-record it with this "
        "version, or read it with the mtpbench that wrote it"
    )


# --- records.jsonl: what the engine writes ------------------------------------------------------------------
# One TypedDict per record type, in the order the engine writes a record's keys (mtpbench/engine/records.py,
# serving.py and soak.py build them; a TypedDict is a plain dict at run time, so the worker stays standard
# library). A key in a `total=False` class is written by some writers only (named beside it).


class SpecCounts(TypedDict):
    """Spec-decode counts of one prompt, request, batch or load (engine/counts.py reads them from vLLM)."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: list[int]


class RecordBase(TypedDict):
    """The keys every record of a cell-repeat starts with (engine/records.base_record)."""

    schema: int
    run_id: str
    cell: str
    build: str
    mode: str
    variant: str
    repeat: int
    hash_seed: int
    attempt: int  # a resumed run re-runs a repeat as a new attempt; readers keep the manifest's attempt


class PromptModeChoice(TypedDict):
    requested: str  # the config's prompt_mode
    effective: str  # what ran: sequential where the build lacks per-request counts or prompts are conversations


class _CellStart(RecordBase):
    type: Literal["cell_start"]
    requested: dict[str, Any]
    effective: dict[str, Any]
    patches: list[dict[str, Any]]
    engine_args: dict[str, Any]
    speculative_config: dict[str, Any]
    sampling: dict[str, Any]
    env: dict[str, Any]
    engine_start_s: float


class CellStartRecord(_CellStart, total=False):
    """The engine as it started (offline worker: imported_from, prompt_mode, sampled_expand; serving:
    workload, per_request_metrics, per_request_reason, patch_mechanism, server)."""

    imported_from: dict[str, Any]
    prompt_mode: PromptModeChoice
    sampled_expand: dict[str, Any]  # sampled jobs only (engine/worker.sampler_probe)
    workload: dict[str, Any]
    per_request_metrics: str  # "summary" or schema.COUNTERS_ONLY
    per_request_reason: str
    patch_mechanism: str
    server: dict[str, Any]


class _PromptFields(RecordBase):
    type: Literal["prompt"]
    prompt_id: str
    num_generated_tokens: int
    output_sha256: str
    wall_s: float
    source: str  # "counters", "per_request" or "metrics_delta"
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: list[int]


class PromptRecord(_PromptFields, total=False):
    """One prompt's evidence: offline (engine/records.PromptLoop), a served request (serving, with
    base_prompt_id, latencies and spec_decode) or a counters-only load's pooled record (prompt_id "load",
    with requests)."""

    round: int  # soak
    context_tokens: int  # a context sweep's bucket: the shared context's tokens before the prompt
    prompt_index: int
    num_prompt_tokens: int
    finish_reason: str | None
    output_head: str
    turns: int  # conversations
    per_request: SpecCounts | None
    uptime_s: float  # soak
    base_prompt_id: str  # serving
    workload: str  # serving: "serving"
    concurrency: int  # serving, a concurrency sweep: the level the request ran at (its id names it too)
    spec_decode: dict[str, Any]
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    itl_s: list[float]
    requests: int  # the pooled record


def _prompt_fields(*names: str) -> tuple[str, ...]:
    """A selection of PromptRecord's keys, refused at import if one is not a key: a field is defined once, by
    the record's type above, and the store's column lists can only name what it defines."""
    unknown = [n for n in names if n not in PromptRecord.__required_keys__ | PromptRecord.__optional_keys__]
    if unknown:
        raise TypeError(f"not fields of PromptRecord: {', '.join(unknown)}")
    return names


# Where a prompt record belongs and its counts: the first columns of both lists below, in this order.
_PROMPT_KEYS = (
    "cell",
    "build",
    "mode",
    "variant",
    "repeat",
    "hash_seed",
    "prompt_id",
    "prompt_index",
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
)

# The prompt frame's columns (store/records.py: one row per prompt record, what judging reads), in order.
PROMPT_FRAME_COLUMNS = _prompt_fields(
    *_PROMPT_KEYS,
    "accepted_per_pos",
    "num_generated_tokens",
    "output_sha256",
    "wall_s",
    "round",
)

# The scalar fields the columnar copy keeps as columns (store/columnar.py); the rest of a record goes to its
# `extra_json` column. Changing this changes the copy's layout: bump columnar.COPY_VERSION with it.
PROMPT_SCALAR_COLUMNS = _prompt_fields(
    *_PROMPT_KEYS,
    "num_prompt_tokens",
    "num_generated_tokens",
    "finish_reason",
    "output_sha256",
    "output_head",
    "wall_s",
    "source",
    "attempt",
    "round",
)


class _RequestFields(RecordBase):
    prompt_id: str  # <prompt id>#<request index>
    base_prompt_id: str
    prompt_index: int
    workload: Literal["serving"]


class RequestRecord(_RequestFields):
    """A served request of a counters-only cell: latencies and tokens, no counts."""

    type: Literal["request"]
    num_prompt_tokens: int
    num_generated_tokens: int
    finish_reason: str | None
    output_sha256: str
    output_head: str
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    itl_s: list[float]
    wall_s: float | None
    source: str  # COUNTERS_ONLY


class RequestFailedRecord(_RequestFields):
    type: Literal["request_failed"]
    error: str | None
    e2e_s: float | None


class LoadRecord(RecordBase):
    """A serving load: its requests' outcomes and the /metrics deltas around it beside the per-request sum."""

    type: Literal["load"]
    requests_total: int
    requests_ok: int
    requests_failed: int
    requests_missing: int
    warmup_ok: int
    wall_s: float
    server_died: bool
    metrics_delta: SpecCounts | None
    per_request_sum: SpecCounts | None
    counts_match: bool | None
    concurrency: int
    request_rate: float | None
    per_request_metrics: str
    per_request_reason: str


class _RoundEnd(RecordBase):
    round: int
    type: Literal["round_end"]
    wall_s: float
    deadline_s: float
    stalled: bool
    unfinished: list[str]


class RoundEndRecord(_RoundEnd, total=False):
    """A soak round (engine/soak.py); the watchdog's record of a step that never returned has `watchdog`
    and none of the round's counters."""

    watchdog: bool
    set: str
    prompts: int
    uptime_start_s: float
    uptime_s: float
    kv_cache_usage_max: float | None
    prefix_cache_queries: int | None
    prefix_cache_hits: int | None
    num_preemptions: int | None


class TornMark(TypedDict):
    """Written before new lines when the file's last line was cut off by a crash (`bytes`: its length)."""

    schema: int
    type: Literal["torn"]
    bytes: int | None


class _CellEnd(RecordBase):
    type: Literal["cell_end"]
    wall_s: float
    engine_start_s: float
    patch_observations: dict[str, Any]


class CellEndRecord(_CellEnd, total=False):
    """The cell-repeat's end, with what its prompt loop returns (PromptLoopResult) before patch_observations."""

    prompt_mode: str
    batch_counters: SpecCounts  # batched
    batch_counters_match: bool
    prompts_without_spec_metrics: list[str]
    conversations: bool
    # The engine's cumulative prefix-cache counters at the repeat's end (vllm:prefix_cache_queries / _hits, in
    # tokens; None: the build does not count them): whether a prefix-caching mode had anything to hit.
    prefix_cache_queries: int | None
    prefix_cache_hits: int | None
    rounds_done: int  # soak
    stalled_round: int | None
