"""Drift within one process: what a soak cell's rounds say (pure; reads the evidence stage's CellResult).

A soak repeat (engine/soak.py) sends its prompts through one engine round after round. Under greedy
decoding a prompt's counts and text must be the same in every round of that process, so any change is
exact evidence: `drift` names the first round that moved and its prompts, no test needed. Under sampling a
change-point test across rounds: the statistic is the largest standardised gap between the pooled
acceptance before and after any split of the round sequence (so a step and a steady trend both count), and
its null distribution comes from permuting each prompt's rounds (a prompt's observations are exchangeable
across rounds when nothing drifts; prompt effects and bursty, prompt-level noise are kept, DESIGN: the prompt
is the unit of evidence). Its false-alarm rate is the stated level (the gate's false_alarm split over the
run's soak cells), which tests/unit/judge/test_drift.py measures under bursty no-drift data. A significant change
fails when it exceeds the gate's tolerance and warns otherwise.

Also: a round that accepts nothing after round 0 accepted drafts (speculation off within the process),
and a round past its deadline (a stall, from the round_end record): each its own finding. `round_stats`
pools each round for the tables and the report's figure.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mtpbench.judge.evidence import COUNT_COLS, SIG, CellResult, pos_cols
from mtpbench.judge.findings import Cause, Finding, Kind, Severity
from mtpbench.judge.findings.soak import Drift, RoundSpeculationOff, Stall
from mtpbench.specs import GateSpec

PERMUTATIONS = 999


@dataclass(frozen=True)
class RoundStat:
    """One round of a soak cell, pooled over its prompts (and repeats)."""

    round: int
    set: str | None
    prompts: int
    drafts: int
    draft_tokens: int
    accepted: int
    per_pos: tuple[int, ...]
    stalled: bool
    uptime_s: float | None
    kv_cache_usage_max: float | None
    prefix_cache_hits: int | None

    @property
    def mean(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None


def round_stats(cell: CellResult) -> list[RoundStat]:
    """Per round (over repeats): the pooled counts and what its round_end records said; [] for other workloads."""
    rows = cell.rounds
    if rows is None or not len(rows):
        return []
    k = cell.evidence.k or sum(1 for c in rows.columns if c.startswith("a") and c[1:].isdigit())
    tot = rows.groupby("round", sort=True)[[*COUNT_COLS, *pos_cols(k)]].sum()
    n = rows.groupby("round", sort=True)["prompt"].nunique()
    ends: dict[int, list[dict[str, Any]]] = {}
    for e in cell.round_ends:
        ends.setdefault(int(e.get("round", -1)), []).append(e)
    out = []
    for r, row in tot.iterrows():
        es = ends.get(int(r), [])
        kv = [float(e["kv_cache_usage_max"]) for e in es if e.get("kv_cache_usage_max") is not None]
        hits = [int(e["prefix_cache_hits"]) for e in es if e.get("prefix_cache_hits") is not None]
        up = [float(e["uptime_s"]) for e in es if e.get("uptime_s") is not None]
        out.append(
            RoundStat(
                round=int(r),
                set=next((str(e["set"]) for e in es if e.get("set")), None),
                prompts=int(n[r]),
                drafts=int(row["num_drafts"]),
                draft_tokens=int(row["num_draft_tokens"]),
                accepted=int(row["num_accepted_tokens"]),
                per_pos=tuple(int(row[c]) for c in pos_cols(k)),
                stalled=any(bool(e.get("stalled")) for e in es),
                uptime_s=max(up) if up else None,
                kv_cache_usage_max=max(kv) if kv else None,
                prefix_cache_hits=sum(hits) if hits else None,
            )
        )
    return out


def _rate(rows: pd.DataFrame) -> float | None:
    d = int(rows["num_draft_tokens"].sum())
    return int(rows["num_accepted_tokens"].sum()) / d if d else None


def _seed(cell: CellResult, repeat: int) -> int | None:
    return next((r.hash_seed for r in cell.repeats if r.repeat == repeat), None)


def _exact(cell: CellResult, rep: int, rows: pd.DataFrame, k: int) -> Drift | None:
    """Greedy: every prompt's counts and text against its first round's, in one process."""
    rows = rows.sort_values("round", kind="stable")
    sig = [*SIG, *pos_cols(k)]
    first = rows.drop_duplicates("prompt", keep="first").set_index("prompt")[sig[1:]]
    ref = first.reindex(rows["prompt"].to_numpy()).to_numpy()
    moved_mask = (rows[sig[1:]].to_numpy() != ref).any(axis=1)
    moved = rows[moved_mask]
    if not len(moved):
        return None
    r0 = int(moved["round"].min())
    at = moved[moved["round"] == r0]
    codes = at["prompt"].to_numpy()
    names = cell.prompt_names[codes]
    before = rows[rows["prompt"].isin(codes)].drop_duplicates("prompt", keep="first")
    sha_ref = first.loc[codes, "sha"].to_numpy()
    compared = rows.groupby("prompt")["round"].nunique()
    return Drift(
        method="exact",
        repeat=rep,
        hash_seed=_seed(cell, rep),
        first_round=r0,
        rounds=int(rows["round"].nunique()),
        prompts=int((compared > 1).sum()),
        rate_before=_rate(before),
        rate_after=_rate(at),
        moved=heapq.nsmallest(10, map(str, names)),
        prompts_moved=len(names),
        rounds_moved=sorted(int(x) for x in moved["round"].unique()),
        same_text=bool((at["sha"].to_numpy() == sha_ref).all()),
    )


def change_point_pvalue(
    acc: np.ndarray, drafts: np.ndarray, permutations: int = PERMUTATIONS, seed: int = 0
) -> tuple[float, int, float] | None:
    """(p-value, first round after the best split, pooled rate after minus before) for prompts × rounds
    matrices of accepted and draft tokens; None when there is nothing to test (fewer than 2 rounds or no drafts)."""
    p, r = acc.shape
    if r < 2 or p < 1 or drafts.sum() == 0:
        return None

    def stat(a: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # a, d: (..., prompts, rounds) -> per split t (rounds before it) the standardised gap, for every batch.
        ca, cd = a.sum(axis=-2).cumsum(axis=-1), d.sum(axis=-2).cumsum(axis=-1)
        ta, td = ca[..., -1:], cd[..., -1:]
        ba, bd = ca[..., :-1], cd[..., :-1]
        before = ba / np.maximum(bd, 1)
        after = (ta - ba) / np.maximum(td - bd, 1)
        w = np.sqrt(bd * (td - bd) / np.maximum(td, 1))
        return np.abs(after - before) * w, before, after

    obs, before, after = stat(acc.astype(float), drafts.astype(float))
    t = int(np.argmax(obs))
    rng = np.random.default_rng(seed)
    # Each prompt's rounds shuffled independently (argsort of uniforms: one permutation per prompt and draw).
    order = np.argsort(rng.random((permutations, p, r)), axis=-1)
    pa = np.take_along_axis(np.broadcast_to(acc, (permutations, p, r)), order, axis=-1).astype(float)
    pd_ = np.take_along_axis(np.broadcast_to(drafts, (permutations, p, r)), order, axis=-1).astype(float)
    null = stat(pa, pd_)[0].max(axis=-1)
    pvalue = (1 + int((null >= obs[t] - 1e-12).sum())) / (permutations + 1)
    return pvalue, t + 1, float(after[t] - before[t])


def _sampled(cell: CellResult, rep: int, rows: pd.DataFrame, alpha: float, gate: GateSpec) -> tuple[Drift, bool] | None:
    """Sampled: the change-point test over the prompts recorded in every round they were sent in (set A)."""
    a_rows = rows[~rows["prompt"].map(lambda c: str(cell.prompt_names[c]).startswith("B:"))]
    n_rounds = a_rows["round"].nunique()
    full = a_rows.groupby("prompt")["round"].nunique()
    a_rows = a_rows[a_rows["prompt"].isin(full[full == n_rounds].index)]
    if not len(a_rows):
        return None
    piv = a_rows.pivot_table(
        index="prompt", columns="round", values=["num_accepted_tokens", "num_draft_tokens"], aggfunc="sum"
    )
    res = change_point_pvalue(piv["num_accepted_tokens"].to_numpy(), piv["num_draft_tokens"].to_numpy())
    if res is None or res[0] >= alpha:
        return None
    pvalue, at, delta = res
    rounds = sorted(int(x) for x in piv["num_accepted_tokens"].columns)
    first_round = rounds[at]
    drift = Drift(
        method="change-point",
        repeat=rep,
        hash_seed=_seed(cell, rep),
        first_round=first_round,
        rounds=len(rounds),
        prompts=len(piv),
        rate_before=_rate(a_rows[a_rows["round"] < first_round]),
        rate_after=_rate(a_rows[a_rows["round"] >= first_round]),
        pvalue=pvalue,
        false_alarm=alpha,
        tolerance_pts=gate.tolerance_pts,
    )
    return drift, abs(delta) * 100 > gate.tolerance_pts


def _off(cell: CellResult, rep: int, rows: pd.DataFrame) -> RoundSpeculationOff | None:
    tot = rows.groupby("round", sort=True)[["num_drafts", "num_draft_tokens", "num_accepted_tokens"]].sum()
    if 0 not in tot.index or int(tot.loc[0, "num_accepted_tokens"]) == 0:
        return None  # round 0 accepted nothing: cell health's speculation-off says so already
    off = [int(r) for r in tot.index if r > 0 and int(tot.loc[r, "num_accepted_tokens"]) == 0]
    if not off:
        return None
    d0 = int(tot.loc[0, "num_draft_tokens"])
    return RoundSpeculationOff(
        repeat=rep,
        hash_seed=_seed(cell, rep),
        first_round=off[0],
        rounds_off=off,
        rate_round0=int(tot.loc[0, "num_accepted_tokens"]) / d0 if d0 else None,
        drafts=int(tot.loc[off[0], "num_drafts"]),
    )


def _stalls(cell: CellResult) -> list[Finding]:
    out = []
    for e in cell.round_ends:
        if not e.get("stalled"):
            continue
        unfinished = [str(u) for u in e.get("unfinished") or []]
        rep = int(e.get("repeat", 0))
        out.append(
            Finding(
                Kind.STALL,
                Severity.FAIL,
                cell.cell,
                Cause.ENGINE_STALLED,
                Stall(
                    repeat=rep,
                    hash_seed=_seed(cell, rep),
                    round=int(e["round"]),
                    deadline_s=e.get("deadline_s"),
                    wall_s=e.get("wall_s"),
                    unfinished=len(unfinished),
                    first_unfinished=heapq.nsmallest(10, unfinished),
                    uptime_s=e.get("uptime_s"),
                    watchdog=bool(e.get("watchdog")),
                ),
            )
        )
    return out


def drift_findings(cell: CellResult, gate: GateSpec, greedy: bool, alpha: float) -> list[Finding]:
    """A soak cell's drift (the earliest over its repeats), rounds with speculation off, and stalls; [] for
    other workloads. `alpha`: the sampled test's level for this cell."""
    rows = cell.rounds
    if rows is None or not len(rows):
        return _stalls(cell) if cell.round_ends else []
    k = cell.evidence.k or len([c for c in rows.columns if c.startswith("a") and c[1:].isdigit()])
    out: list[Finding] = []
    drifts: list[tuple[Drift, Severity]] = []
    offs: list[RoundSpeculationOff] = []
    for rep, reps_rows in rows.groupby("repeat", sort=True):
        if greedy:
            d = _exact(cell, int(rep), reps_rows, k)
            if d is not None:
                drifts.append((d, Severity.FAIL))  # exact evidence: any change fails
        else:
            got = _sampled(cell, int(rep), reps_rows, alpha, gate)
            if got is not None:
                drifts.append((got[0], Severity.FAIL if got[1] else Severity.WARN))
        o = _off(cell, int(rep), reps_rows)
        if o is not None:
            offs.append(o)
    if drifts:
        d, sev = min(drifts, key=lambda x: (x[0].first_round, x[0].repeat))
        out.append(Finding(Kind.DRIFT, sev, cell.cell, Cause.IN_PROCESS_STATE, d))
    if offs:
        o = min(offs, key=lambda x: (x.first_round, x.repeat))
        out.append(Finding(Kind.SPECULATION_OFF, Severity.FAIL, cell.cell, Cause.IN_PROCESS_STATE, o))
    return out + _stalls(cell)
