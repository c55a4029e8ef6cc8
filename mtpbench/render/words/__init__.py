"""Every sentence a person or a CI reads about a comparison, one module per finding family; this module is the
index: it maps each finding kind to its sentence (`MESSAGES`) and words a whole finding (`finding_message`,
`cause_text`, `finding_line`) for report.py (tables, JSON, Markdown), junit.py, ci.py and htmlreport.py.

Where a kind's sentence lives (judge/findings/__init__.py's `Kind`, by its value):
- checks.py: regression, inconclusive, underpowered, improvement (the gate's acceptance-length and
  per-position checks), and one check in words for JUnit and the CI annotations;
- cells.py: speculation-off, no-baseline, run-failed, graph-mode-downgraded, unchecked-baseline,
  baseline-from-this-run, fix-not-applied, patch-not-applied, sampled-acceptance-not-meaningful (what a cell
  can be trusted for);
- signatures.py: cross-process-instability, graph-divergence, text-changed;
- builds.py: build-divergence (a build against the reference build at the same mode and variant);
- features.py: mode-divergence, feature-ignored (a mode against the reference mode where they differ in an
  engine feature; a feature the engine read back otherwise);
- context.py: context-decay (a context sweep's longer bucket accepting less than its first), and the
  per-bucket table's and plot's words;
- serving.py: failed-requests, count-mismatch, throughput-drop;
- soak.py: drift, stall, and speculation-off within one engine's rounds;
- probes.py: metadata-binding, metadata-binding-unobserved, fix-verification, graph-not-replayed,
  draft-graph-replay (and the words of the HTML report's binding grid);
- upstream.py: upstream-rule, request-al-regression, request-al-inconclusive;
- reference.py: engine-below-reference, reference-disagreement, reference-text-differs (the engine held
  against the acceptance its weights give);
- exactness.py: exactness-lost (prompts that stopped counting exactly, on a platform the run showed exact);
- per_request.py: request-acceptance-collapse, request-accepts-everything (per-request alarms with no
  baseline), and the acceptance-histogram table's words.
Beside them: causes.py (the likely cause each finding points at), verdict.py (the verdict line and what a pass
certifies), runtime.py (where a run's time went) and units.py (numbers as the sentences and tables write
them). No arithmetic beyond turning fractions into the percentages people read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mtpbench.errors import ExitCode
from mtpbench.judge.findings import Finding, Kind
from mtpbench.render.words.builds import msg_build_divergence
from mtpbench.render.words.causes import CAUSE_TEXT
from mtpbench.render.words.cells import (
    msg_downgraded,
    msg_no_baseline,
    msg_not_applied,
    msg_run_failed,
    msg_same_run,
    msg_sampler_broken,
    msg_speculation_off,
    msg_unchecked,
)
from mtpbench.render.words.checks import (
    check_message,
    length_message,
    msg_improvement,
    msg_inconclusive,
    msg_regression,
    msg_underpowered,
)
from mtpbench.render.words.context import msg_context_decay
from mtpbench.render.words.exactness import msg_exactness_lost
from mtpbench.render.words.features import msg_feature_ignored, msg_mode_divergence
from mtpbench.render.words.ksweep import msg_k_dependence
from mtpbench.render.words.per_request import msg_request_alarm
from mtpbench.render.words.probes import (
    msg_binding_unobserved,
    msg_fix_verification,
    msg_graph_replay,
    msg_metadata_binding,
)
from mtpbench.render.words.reference import (
    msg_engine_below_reference,
    msg_reference_disagreement,
    msg_reference_text_differs,
)
from mtpbench.render.words.serving import msg_count_mismatch, msg_failed_requests, msg_throughput_drop
from mtpbench.render.words.signatures import msg_divergence, msg_instability, msg_text_changed
from mtpbench.render.words.soak import msg_drift, msg_stall
from mtpbench.render.words.units import ci_text, pct, pts
from mtpbench.render.words.upstream import upstream_message
from mtpbench.render.words.verdict import certified_text, verdict_text

__all__ = [
    "CAUSE_TEXT",
    "MESSAGES",
    "cause_text",
    "certified_text",
    "check_message",
    "ci_text",
    "finding_head",
    "finding_line",
    "finding_message",
    "length_message",
    "pct",
    "pts",
    "severity_word",
    "verdict_text",
]

MESSAGES: dict[Kind, Callable[[Any], str]] = {
    Kind.REGRESSION: msg_regression,
    Kind.INCONCLUSIVE: msg_inconclusive,
    Kind.UNDERPOWERED: msg_underpowered,
    Kind.IMPROVEMENT: msg_improvement,
    Kind.SPECULATION_OFF: msg_speculation_off,
    Kind.NO_BASELINE: msg_no_baseline,
    Kind.RUN_FAILED: msg_run_failed,
    Kind.INSTABILITY: msg_instability,
    Kind.GRAPH_DIVERGENCE: msg_divergence,
    Kind.MODE_DIVERGENCE: msg_mode_divergence,
    Kind.BUILD_DIVERGENCE: msg_build_divergence,
    Kind.CONTEXT_DECAY: msg_context_decay,
    Kind.TEXT_CHANGED: msg_text_changed,
    Kind.GRAPH_DOWNGRADED: msg_downgraded,
    Kind.FEATURE_IGNORED: msg_feature_ignored,
    Kind.UNCHECKED: msg_unchecked,
    Kind.SAME_RUN_BASELINE: msg_same_run,
    Kind.FAILED_REQUESTS: msg_failed_requests,
    Kind.COUNT_MISMATCH: msg_count_mismatch,
    Kind.THROUGHPUT_DROP: msg_throughput_drop,
    Kind.FIX_NOT_APPLIED: msg_not_applied,
    Kind.PATCH_NOT_APPLIED: msg_not_applied,
    Kind.SAMPLER_BROKEN: msg_sampler_broken,
    Kind.DRIFT: msg_drift,
    Kind.STALL: msg_stall,
    Kind.METADATA_BINDING: msg_metadata_binding,
    Kind.BINDING_UNOBSERVED: msg_binding_unobserved,
    Kind.FIX_VERIFICATION: msg_fix_verification,
    Kind.GRAPH_NOT_REPLAYED: msg_graph_replay,
    Kind.GRAPH_REPLAY: msg_graph_replay,
    **dict.fromkeys((Kind.UPSTREAM_RULE, Kind.REQUEST_AL_REGRESSION, Kind.REQUEST_AL_INCONCLUSIVE), upstream_message),
    Kind.ENGINE_BELOW_REFERENCE: msg_engine_below_reference,
    Kind.REFERENCE_DISAGREEMENT: msg_reference_disagreement,
    Kind.REFERENCE_TEXT_DIFFERS: msg_reference_text_differs,
    Kind.EXACTNESS_LOST: msg_exactness_lost,
    Kind.K_DEPENDENT: msg_k_dependence,
    Kind.REQUEST_COLLAPSE: msg_request_alarm,
    Kind.REQUEST_ALL_ACCEPTED: msg_request_alarm,
}


def finding_message(f: Finding) -> str:
    return MESSAGES[f.kind](f.payload)


def cause_text(f: Finding) -> str:
    return CAUSE_TEXT.get(f.cause, "")


def severity_word(f: Finding) -> str:
    """The word a finding is printed under: its severity, except that a failing finding whose exit is 5 is
    INCONCLUSIVE, not FAIL (FAIL reads as a regression, exit 1)."""
    if f.exit_code == ExitCode.INCONCLUSIVE:
        return "INCONCLUSIVE"
    return f.severity.value.upper()


def finding_head(f: Finding) -> str:
    """`FAIL graph-divergence`, `INCONCLUSIVE underpowered`, or `INCONCLUSIVE` alone for the kind
    `inconclusive` (never "FAIL inconclusive")."""
    word = severity_word(f)
    return word if f.name == word.lower() else f"{word} {f.name}"


def finding_line(f: Finding) -> str:
    """One line, e.g. for a CI annotation: severity, kind, cell, what was seen."""
    return f"{finding_head(f)} {f.cell}: {finding_message(f)}"
