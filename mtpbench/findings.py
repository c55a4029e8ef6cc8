"""What a judgement found, as data: the kinds, severities, causes and verdicts, and the exit code each
failing kind demands (errors.combine_exit_codes picks among them). Rendering words them (report.py);
nothing here prints or builds a sentence, except what a producer outside the judge handed over (Diagnosis).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from mtpbench.errors import ExitCode


class Severity(str, Enum):
    FAIL = "fail"  # breaks the gate: the finding's kind decides the exit code
    WARN = "warn"
    INFO = "info"


FAIL, WARN, INFO = Severity.FAIL, Severity.WARN, Severity.INFO  # the names before 0.2


class Verdict(str, Enum):
    """Of one cell × position against its baseline entry."""

    PASS = "pass"
    REGRESSION = "regression"  # beyond the tolerance, and the interval on the difference excludes zero
    INCONCLUSIVE = "inconclusive"  # beyond the tolerance, but the data cannot support it
    IMPROVEMENT = "improvement"
    NO_DATA = "no-data"  # no complete repeat, or no drafts
    NO_BASELINE = "no-baseline"


class Kind(str, Enum):
    REGRESSION = "regression"
    INCONCLUSIVE = "inconclusive"
    UNDERPOWERED = "underpowered"
    IMPROVEMENT = "improvement"
    SPECULATION_OFF = "speculation-off"
    NO_BASELINE = "no-baseline"
    RUN_FAILED = "run-failed"
    INSTABILITY = "cross-process-instability"
    GRAPH_DIVERGENCE = "graph-divergence"
    TEXT_CHANGED = "text-changed"
    GRAPH_DOWNGRADED = "graph-mode-downgraded"
    UNCHECKED = "unchecked-baseline"
    # The serving workload's (mtpbench/serving_summary.py): worded by their producer, numbers["message"].
    FAILED_REQUESTS = "failed-requests"
    COUNT_MISMATCH = "count-mismatch"
    THROUGHPUT_DROP = "throughput-drop"
    EXTERNAL = "external"  # any other producer's; numbers["kind"] holds its own name


class Cause(str, Enum):
    """The likely cause a finding points at; report.py holds the sentence for each."""

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
    PLATFORM_DOWNGRADE = "platform-downgrade"
    UNVERIFIED_IDENTITY = "unverified-identity"
    NO_PER_REQUEST_COUNTS = "no-per-request-counts"  # a counters-only serving cell: one pooled count
    EXTERNAL = "external"  # numbers["cause_text"] holds the producer's sentence


# The exit code a failing finding of each kind demands (errors.combine_exit_codes picks among them).
KIND_EXIT: dict[Kind, ExitCode] = {
    Kind.REGRESSION: ExitCode.REGRESSION,
    Kind.SPECULATION_OFF: ExitCode.REGRESSION,
    Kind.INSTABILITY: ExitCode.REGRESSION,
    Kind.GRAPH_DIVERGENCE: ExitCode.REGRESSION,
    Kind.IMPROVEMENT: ExitCode.REGRESSION,  # only fails under gate.fail_on_improvement
    Kind.INCONCLUSIVE: ExitCode.INCONCLUSIVE,
    Kind.UNDERPOWERED: ExitCode.INCONCLUSIVE,  # only fails under gate.fail_on_underpowered
    Kind.NO_BASELINE: ExitCode.NOT_COMPARABLE,
    Kind.RUN_FAILED: ExitCode.RUN_FAILED,
    Kind.FAILED_REQUESTS: ExitCode.REGRESSION,  # any failed request under load fails the gate
    Kind.THROUGHPUT_DROP: ExitCode.REGRESSION,  # only fails under workload.fail_on_throughput_drop
    Kind.EXTERNAL: ExitCode.REGRESSION,
}
# Kinds whose sentence their producer wrote (Diagnosis below); report.py words all the others.
PRODUCER_WORDED = {Kind.FAILED_REQUESTS, Kind.COUNT_MISMATCH, Kind.THROUGHPUT_DROP, Kind.EXTERNAL}


@dataclass
class Finding:
    kind: Kind
    severity: Severity
    cell: str
    cause: Cause = Cause.NONE
    numbers: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The kind's name; a serving finding keeps its own (failed-requests, throughput-drop, …)."""
        return str(self.numbers.get("kind", "")) if self.kind == Kind.EXTERNAL else self.kind.value

    @property
    def message(self) -> str:
        """The sentence of a finding worded by its producer; report.finding_message words every finding."""
        return str(self.numbers.get("message", ""))

    @property
    def exit_code(self) -> ExitCode:
        if self.severity != Severity.FAIL:
            return ExitCode.OK
        return KIND_EXIT.get(self.kind, ExitCode.OK)


# Findings worded by the module that makes them (the serving workload: mtpbench/serving_summary.py);
# a failing one is a regression of the gate (exit 1), e.g. failed requests under load.
def Diagnosis(  # the constructor name other modules used before 0.2
    kind: str, severity: str, cell: str, message: str = "", cause: str = "", numbers: dict[str, Any] | None = None
) -> Finding:
    """A finding whose producer wrote its own sentence (kept in numbers["message"] / ["cause_text"])."""
    known = {k.value: k for k in Kind}
    return Finding(known.get(kind, Kind.EXTERNAL), Severity(severity), cell, Cause.EXTERNAL,
                   {**(numbers or {}), "kind": kind, "message": message, "cause_text": cause})  # fmt: skip
