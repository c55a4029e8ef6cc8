"""Per-request acceptance in one shape, and the two alarms it allows with no baseline (issue 39 item 3).

The shape is vLLM's per-request spec-decode metrics (vllm#48915, `RequestSpecDecodeMetrics.to_dict` in
vllm/v1/metrics/stats.py at v0.32.0): `acceptance_histogram[j]` = verify steps of the request that accepted
exactly j drafts (length k + 1), `num_spec_steps` = their sum. A request's records hold its counts either way
they were taken: from that histogram (engine/counts.counts_from_histogram: position i was accepted in every
step that accepted more than i, a prefix) where the build returns per-request metrics (batched prompts,
served requests: record source "per_request"), or as mtpbench's own counter deltas around the prompt where it
does not (sequential prompts: source "counters"). The map histogram -> counts is one-to-one, so
`histogram_from_counts` gives the histogram back from either: h[0] = drafts − a0, h[j] = a(j−1) − a(j),
h[k] = a(k−1).

The alarms (each a FAIL of its own kind, exit 1 like every bug signature):

- **request-acceptance-collapse**: a request that accepted no draft over at least COLLAPSE_MIN_STEPS (64)
  verify steps, or every request of one cell-repeat doing so over that many steps together (the collapse
  sglang-jax#1586 says nothing would notice). A healthy drafter whose first draft is accepted with
  probability p0 does this with probability (1 − p0)^64 per request, steps taken as independent: 6·10⁻⁷ at
  p0 = 0.2, 10⁻¹⁰ at p0 = 0.3. In the stored real runs of the tiny pair (tests/data/runs) no request
  accepted nothing at all; the most any request spent on zero-accept steps was 11 % of its steps (38 %
  under the flattening fault).
- **request-accepts-everything**: every request of one cell-repeat, at least ALL_ACCEPTED_MIN_REQUESTS
  (16) of them over at least ALL_ACCEPTED_MIN_STEPS (256) verify steps together, accepted every draft at
  every step (the NaN-logits class, TRT-LLM#5146: target and drafter both take the argmax of NaN logits, so
  every draft "matches", on every request at once). Not one request alone: the steps of a request are far
  from independent, and a healthy near-perfect drafter accepts whole requests (the tiny pair accepted every
  draft of 20 of its 40 HumanEval requests at 128 tokens, tests/data/runs/exactness-moving-positions). With
  half the requests perfect, a healthy cell-repeat of 16 trips it with probability 0.5^16 = 1.5·10⁻⁵
  (prompts taken as independent); a drafter as good as Gemma-4's golden (whole step accepted 84 %) far less.

Nothing here prints.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mtpbench.judge.evidence import CellResult, pos_cols
from mtpbench.judge.findings import Cause, Finding, Kind, Severity
from mtpbench.judge.findings.per_request import RequestAlarm
from mtpbench.store.results import Run

COLLAPSE_MIN_STEPS = 64
ALL_ACCEPTED_MIN_STEPS = 256
ALL_ACCEPTED_MIN_REQUESTS = 16
# Where a cell's per-request counts came from (the prompt records' `source`).
VLLM_PER_REQUEST = "vllm-per-request"  # vLLM's acceptance histogram (vllm#48915)
MTPBENCH_COUNTERS = "mtpbench-counters"  # mtpbench's counter deltas around each prompt
NAMED = 10  # requests named in a finding, the longest first (RequestAlarm.named)


def histogram_from_counts(num_drafts: int, accepted_per_pos: list[int] | np.ndarray) -> tuple[int, ...] | None:
    """The acceptance histogram (index j = steps that accepted exactly j drafts) whose prefix counts these
    are; None where they are not a prefix's (a position accepted more often than the one before it)."""
    a = [int(num_drafts), *(int(x) for x in accepted_per_pos), 0]
    hist = tuple(a[j] - a[j + 1] for j in range(len(a) - 1))
    return hist if all(h >= 0 for h in hist) else None


@dataclass(frozen=True)
class RequestAcceptance:
    """One request (a prompt of one repeat) in vLLM's per-request shape."""

    prompt: str
    repeat: int
    histogram: tuple[int, ...]  # index j: verify steps that accepted exactly j drafts
    num_draft_tokens: int

    @property
    def num_spec_steps(self) -> int:
        return sum(self.histogram)

    @property
    def num_accepted(self) -> int:
        return sum(j * c for j, c in enumerate(self.histogram))


@dataclass(frozen=True)
class CellHistogram:
    """A cell's per-request acceptance: the pooled histogram over its requests, where the counts came from,
    and the requests the alarms name."""

    cell: str
    source: str  # VLLM_PER_REQUEST | MTPBENCH_COUNTERS
    requests: list[RequestAcceptance]

    @functools.cached_property
    def histogram(self) -> tuple[int, ...]:
        if not self.requests:
            return ()
        return tuple(int(x) for x in np.sum([r.histogram for r in self.requests], axis=0))

    @property
    def num_spec_steps(self) -> int:
        return sum(self.histogram)

    def document(self) -> dict[str, object]:
        """The JSON's `per_request` entry of the cell (the histogram pooled; the requests are in records.jsonl)."""
        return {
            "cell": self.cell,
            "source": self.source,
            "requests": len(self.requests),
            "num_spec_steps": self.num_spec_steps,
            "acceptance_histogram": list(self.histogram),
        }


def _sources(run: Run) -> dict[str, str]:
    """Per cell, where its per-request counts came from: vLLM's histogram where any of its prompt records
    says `source: per_request`, else mtpbench's counter deltas (the prompt frame read once)."""
    df = run.prompt_frame()
    if "source" not in df.columns or not len(df):
        return {}
    vllm = df.loc[df["source"].astype(str) == "per_request", "cell"]
    return dict.fromkeys(map(str, vllm.unique()), VLLM_PER_REQUEST)


def requests_of(c: CellResult) -> list[RequestAcceptance]:
    """The cell's requests of its complete repeats (round 0 of a soak) that drafted at all, in one shape."""
    obs: pd.DataFrame = c.observations
    k = c.evidence.k
    if not len(obs):
        return []
    # histogram_from_counts over every row at once (a serving run holds up to 10⁶ requests).
    drafts = obs["num_drafts"].to_numpy(dtype=np.int64)
    prefix = np.column_stack([drafts, obs[pos_cols(k)].to_numpy(dtype=np.int64), np.zeros(len(obs), np.int64)])
    hists = prefix[:, :-1] - prefix[:, 1:]
    keep = (drafts > 0) & (hists >= 0).all(axis=1)
    names = c.prompt_names[obs["prompt"].to_numpy()[keep]]
    rows = zip(
        names.tolist(),
        obs["repeat"].to_numpy()[keep].tolist(),
        hists[keep].tolist(),
        obs["num_draft_tokens"].to_numpy(dtype=np.int64)[keep].tolist(),
        strict=True,
    )
    return [RequestAcceptance(str(p), int(r), tuple(h), int(t)) for p, r, h, t in rows]


def cell_histograms(run: Run, cells: list[CellResult]) -> list[CellHistogram]:
    """Per cell with per-request evidence (a counters-only serving cell has none), its histogram."""
    sources = _sources(run)
    return [
        CellHistogram(c.cell, sources.get(c.cell, MTPBENCH_COUNTERS), requests_of(c))
        for c in cells
        if not c.counters_only
    ]


@dataclass(frozen=True)
class AlarmRule:
    """One alarm: a request trips it alone (`alone`) with `min_steps` verify steps, or the requests of a
    cell-repeat together, at least `min_requests` of them with `min_steps` steps in all."""

    kind: Kind
    cause: Cause
    name: str
    min_steps: int
    alone: bool
    min_requests: int


COLLAPSE = AlarmRule(Kind.REQUEST_COLLAPSE, Cause.DRAFTS_ALL_REJECTED, "collapse", COLLAPSE_MIN_STEPS, True, 1)
ALL_ACCEPTED = AlarmRule(
    Kind.REQUEST_ALL_ACCEPTED,
    Cause.DEGENERATE_LOGITS,
    "all-accepted",
    ALL_ACCEPTED_MIN_STEPS,
    False,
    ALL_ACCEPTED_MIN_REQUESTS,
)


def _flagged(h: CellHistogram, hit: list[bool], rule: AlarmRule) -> tuple[list[RequestAcceptance], list[int]]:
    """The requests that trip the rule alone, and the cell-repeats whose requests all trip it together."""
    alone = [r for r, x in zip(h.requests, hit, strict=True) if rule.alone and x and r.num_spec_steps >= rule.min_steps]
    pooled: list[int] = []
    for rep in sorted({r.repeat for r in h.requests}):
        mine = [(r, x) for r, x in zip(h.requests, hit, strict=True) if r.repeat == rep]
        steps = sum(r.num_spec_steps for r, _ in mine)
        together = all(x for _, x in mine) and len(mine) >= rule.min_requests and steps >= rule.min_steps
        if together and not any(r.repeat == rep for r in alone):
            pooled.append(rep)
    return alone, pooled


def _alarm(h: CellHistogram, rule: AlarmRule, hit: list[bool]) -> Finding | None:
    alone, pooled = _flagged(h, hit, rule)
    if not alone and not pooled:
        return None
    longest = sorted(alone, key=lambda r: (-r.num_spec_steps, r.prompt, r.repeat))
    in_pool = [r for r in h.requests if r.repeat in pooled]
    steps = longest[0].num_spec_steps if longest else sum(r.num_spec_steps for r in in_pool)
    return Finding(
        rule.kind,
        Severity.FAIL,
        h.cell,
        rule.cause,
        RequestAlarm(
            alarm=rule.name,
            requests=len(alone) + len(in_pool),
            named=[f"{r.prompt}@{r.repeat}" for r in [*longest, *in_pool][:NAMED]],
            pooled_repeats=pooled,
            steps=steps,
            min_steps=rule.min_steps,
            min_requests=rule.min_requests,
            of_requests=len(h.requests),
            source=h.source,
        ),
    )


def per_request_findings(hists: list[CellHistogram]) -> list[Finding]:
    """Both alarms over each cell's requests: a collapse, then every draft accepted at every step."""
    out: list[Finding] = []
    for h in hists:
        nothing = [r.num_accepted == 0 for r in h.requests]
        everything = [r.num_accepted == r.num_draft_tokens for r in h.requests]
        for f in (_alarm(h, COLLAPSE, nothing), _alarm(h, ALL_ACCEPTED, everything)):
            if f is not None:
                out.append(f)
    return out
