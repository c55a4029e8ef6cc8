"""The words of the soak workload's findings (judge/signals/drift.py): drift (counts that moved between rounds of one
engine), stall (a round past its deadline) and speculation-off within one engine (a round that accepted no
draft token after round 0 did). Sentences only.
"""

from __future__ import annotations

from mtpbench.judge.findings.soak import Drift, RoundSpeculationOff, Stall
from mtpbench.render.words.units import pct

__all__ = ["msg_drift", "msg_round_speculation_off", "msg_stall"]


def msg_round_speculation_off(n: RoundSpeculationOff) -> str:
    return (
        f"within one process (PYTHONHASHSEED={n.hash_seed}): round {n.first_round} accepted no draft token "
        f"({n.drafts} drafts) after round 0 accepted {pct(n.rate_round0)} %; rounds "
        f"{', '.join(map(str, n.rounds_off))} accepted nothing"
    )


def msg_drift(n: Drift) -> str:
    where = f"one engine (PYTHONHASHSEED={n.hash_seed}), {n.rounds} rounds"
    rates = f"mean acceptance {pct(n.rate_before)} % -> {pct(n.rate_after)} %"
    if n.method == "exact":
        text = "generated text unchanged" if n.same_text else "generated text also changed"
        return (
            f"greedy counts changed within {where}: first at round {n.first_round}, {n.prompts_moved} of "
            f"{n.prompts} prompts moved ({', '.join(n.moved)}); {rates} on them; rounds moved: "
            f"{', '.join(map(str, n.rounds_moved or []))}; {text}"
        )
    return (
        f"acceptance changed within {where}: from round {n.first_round} on, {rates} over {n.prompts} prompts "
        f"(change-point permutation test p={n.pvalue:.2g} at false-alarm rate {n.false_alarm:.2g}; "
        f"tolerance {n.tolerance_pts:g} pts)"
    )


def msg_stall(n: Stall) -> str:
    how = "the step loop never returned (watchdog)" if n.watchdog else f"it ran {n.wall_s:.1f} s"
    first = f" ({', '.join(n.first_unfinished)})" if n.first_unfinished else ""
    up = "" if n.uptime_s is None else f", engine up {n.uptime_s:.0f} s"
    return (
        f"round {n.round} (PYTHONHASHSEED={n.hash_seed}) passed its {n.deadline_s:g} s deadline: {how}, "
        f"{n.unfinished} prompts unfinished{first}{up}; no later round was sent"
    )
