"""The words of a cell's health, the findings that say what a cell's numbers can be trusted for: speculation-off
(no drafts in a repeat; within one engine's rounds it is soak.py's), no-baseline, run-failed,
graph-mode-downgraded, unchecked-baseline, baseline-from-this-run, fix-not-applied / patch-not-applied and
sampled-acceptance-not-meaningful. Sentences only.
"""

from __future__ import annotations

from mtpbench.fixes.status import is_fix
from mtpbench.judge.findings import (
    Downgraded,
    NoBaseline,
    PatchNotApplied,
    RunFailed,
    SameRunBaseline,
    SamplerBroken,
    SpeculationOff,
    Unchecked,
)
from mtpbench.judge.findings.soak import RoundSpeculationOff
from mtpbench.render.words.soak import msg_round_speculation_off

__all__ = [
    "msg_downgraded",
    "msg_no_baseline",
    "msg_not_applied",
    "msg_run_failed",
    "msg_same_run",
    "msg_sampler_broken",
    "msg_speculation_off",
    "msg_unchecked",
]


def msg_speculation_off(n: SpeculationOff | RoundSpeculationOff) -> str:
    if isinstance(n, RoundSpeculationOff):  # the same kind within one engine's rounds: the soak's words
        return msg_round_speculation_off(n)
    seeds = ", ".join(f"PYTHONHASHSEED={s}" for s in n.hash_seeds)
    where = f"every complete repeat ({seeds})" if n.all else f"repeats {seeds} of {n.repeats}"
    return f"zero drafts recorded in {where}: speculative decoding did not run"


def msg_no_baseline(n: NoBaseline) -> str:
    return (
        f"baseline {n.baseline} has no entry for {n.build}/{n.mode} (entries: {', '.join(n.entries)}); "
        'name one with `baseline_entry:` in the config, add a `mode: "*"` entry for the build, or pass '
        "--allow-unmatched"
    )


def msg_run_failed(n: RunFailed) -> str:
    if not n.excluded:
        return "the run did not finish"
    parts = [
        f"r{e.repeat} (PYTHONHASHSEED={e.hash_seed}) "
        + (
            f"finished by the manifest, but records.jsonl holds {e.prompts}/{e.expected} of its prompts"
            if e.status == "ok"
            else f"{e.status}, {e.prompts}/{e.expected} prompts"
        )
        for e in n.excluded
    ]
    return (
        f"{len(n.excluded)} of {n.repeats} repeats left out of every verdict: {'; '.join(parts)}; "
        f"verdicts use the {n.used} complete one(s)"
    )


def msg_downgraded(n: Downgraded) -> str:
    return f"requested cudagraph_mode {n.requested} ran as {n.effective} on {n.device_type or 'this platform'}"


def msg_unchecked(n: Unchecked) -> str:
    if not n.accepted_by:
        return f"the baseline does not record {', '.join(n.fields)}: not checked"
    why = "the run's config names it as its baseline" if n.accepted_by == "config" else "--accept-unchecked"
    return f"the baseline cannot check {', '.join(n.fields)}; used because {why}"


def msg_same_run(n: SameRunBaseline) -> str:
    return (
        f"the baseline {n.baseline} was saved from this same run ({n.run_id}): the cells it was saved from "
        "agree with it by construction, so their comparison certifies nothing"
    )


def msg_not_applied(n: PatchNotApplied) -> str:
    what = "fix not applied" if is_fix(n.patch) else "patch not applied"
    why = "; ".join(d.removeprefix("fix not applied: ") for d in n.details)
    return (
        f"{n.patch}: {what} in {n.repeats} of {n.of} repeats ({n.status}: {why}); this cell measured the "
        "build without it, whatever its variant's name says"
    )


def msg_sampler_broken(n: SamplerBroken) -> str:
    seeds = ", ".join(f"PYTHONHASHSEED={s}" for s in n.hash_seeds)
    return (
        f"sampled acceptance measured with an expand kernel that leaves the per-token temperature unwritten "
        f"({seeds}: {n.detail}); these rates measure leftover memory, not the drafter"
    )
