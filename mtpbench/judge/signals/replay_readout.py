"""The graph-replay probe's read-out (mtpbench/patches/probes/graph_replay.py): per cell, did the drafter replay graphs?

A cell that requested a graph mode which the engine also reports as effective must show the draft
replaying captured graphs; if the drafter's runnable is no graph wrapper, or it never replayed, the cell
measured the draft eagerly under a graph mode's name: `graph-not-replayed` (FAIL, exit 1). Every probed cell
also gets its proof as an INFO finding: how many draft graphs and replays, or, where the platform ran NONE
(the CPU), that there was no graph to replay, so nothing is claimed. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mtpbench.judge.evidence import CellMeta, CellResult
from mtpbench.judge.findings import Cause, Finding, Kind, Severity
from mtpbench.judge.findings.probes import GraphReplay

PROBE = "graph-replay"


def _requested(c: CellResult) -> str | None:
    if c.requested.get("enforce_eager"):
        return "eager"
    mode = c.requested.get("cudagraph_mode")
    return None if mode is None else str(mode)


def _well_formed(obs: Mapping[str, Any]) -> bool:
    """The shape the probe writes; anything else counts as not recorded (never as evidence, never a crash)."""
    try:
        calls = obs.get("draft_calls") or {}
        counts = [int(obs.get("proposes") or 0), int(obs.get("captured") or 0)]
        counts += [int(calls.get(k, 0)) for k in ("eager", "capture", "replay")]
    except (TypeError, ValueError, AttributeError):
        return False
    return all(n >= 0 for n in counts) and isinstance(obs.get("graph_wrapper", False), bool)


def replay_findings(cells: Iterable[CellResult], meta: Iterable[CellMeta]) -> list[Finding]:
    probed: dict[str, list[tuple[int | None, Mapping[str, Any] | None]]] = {}
    for m in meta:
        if m.applied(PROBE):
            obs = m.observations.get(PROBE)
            kept = obs if isinstance(obs, Mapping) and _well_formed(obs) else None
            probed.setdefault(m.cell, []).append((m.hash_seed, kept))
    out: list[Finding] = []
    for c in cells:
        if c.cell not in probed:
            continue
        out.append(_judge(c, probed[c.cell]))
    return out


def _judge(c: CellResult, reps: list[tuple[int | None, Mapping[str, Any] | None]]) -> Finding:
    seen = [o for _, o in reps if o is not None and "error" not in o]
    requested, effective = _requested(c), c.effective.get("cudagraph_mode")
    calls = [dict(o.get("draft_calls") or {}) for o in seen]

    def fewest(values: list[int]) -> int:
        return min(values) if values else 0

    payload = dict(
        requested=requested,
        effective=None if effective is None else str(effective),
        device_type=c.effective.get("device_type"),
        runnable=next((str(o.get("runnable")) for o in seen if o.get("runnable")), None),
        graph_wrapper=bool(seen) and all(bool(o.get("graph_wrapper")) for o in seen),
        captured=fewest([int(o.get("captured") or 0) for o in seen]),
        replays=fewest([int(x.get("replay", 0)) for x in calls]),
        captures=fewest([int(x.get("capture", 0)) for x in calls]),
        eager_calls=fewest([int(x.get("eager", 0)) for x in calls]),
        proposes=fewest([int(o.get("proposes") or 0) for o in seen]),
        hash_seeds=[seed for seed, _ in reps],
    )
    graphs_asked = requested not in (None, "eager", "NONE")
    graphs_ran = effective is not None and str(effective) != "NONE"
    if len(seen) < len(reps) or not payload["proposes"]:
        status = "unobserved"
    elif not graphs_asked:
        status = "eager-requested"
    elif not graphs_ran:
        status = "no-graph-effective"
    elif payload["graph_wrapper"] and payload["replays"] > 0:
        status = "replayed"
    else:
        status = "not-replayed"
    proof = GraphReplay(status=status, **payload)
    if status == "not-replayed":
        return Finding(Kind.GRAPH_NOT_REPLAYED, Severity.FAIL, c.cell, Cause.DRAFT_EAGER_FALLBACK, proof)
    severity = Severity.WARN if status == "unobserved" and graphs_asked and graphs_ran else Severity.INFO
    return Finding(Kind.GRAPH_REPLAY, severity, c.cell, Cause.NONE, proof)
