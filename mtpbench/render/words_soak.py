"""The words of the soak workload's findings (judge/drift.py): counts that moved between rounds of one engine,
and a round past its deadline. Part of words.py (which maps the finding kinds to these messages), in its own
file because words.py reached the 400-line limit. Sentences only."""

from __future__ import annotations

from mtpbench.judge.findings_soak import Drift, Stall
from mtpbench.render.fmt import pct


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
