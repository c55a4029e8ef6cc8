"""Exactness is evidence (issue 34): where the run showed its platform exact, a prompt that stops counting what
the weights say (or what the reference build counts) is a finding of its own, `exactness-lost` (exit 1),
however small the pooled change. A source edit that made vLLM 0.32's Gemma4 draft positions advance between
draft steps moved AL by 1.6 % (below δ: neither build-divergence nor engine-below-reference could see it)
while 8 of its 20 prompts counted otherwise than the weights, where the clean build counted all 20 exactly
(docs/reference.md).

A platform whose numerics are not bit-exact (bf16 on a GPU or NPU) flips near-ties either way, so a healthy
build there must not trip it. The finding is therefore only asked where the run itself showed exactness, and
only on prompts with the same text (another text is the target's numerics: text-changed,
reference-text-differs):
- against the weights (a stored reference, judge/signals/reference_comparison.py): an *anchor* is a cell of the
  reference build (the only build of a one-build run) that counted exactly what the weights say on every prompt and
  repeat, over at least ANCHOR_MIN_PROMPTS prompts. A float32 CPU engine does (900 of 900 observations on the shipped
  default); an engine whose kernels round otherwise than the replay's flips some near-tie and has no anchor,
  and then nothing is asked. With an anchor,
  one inexact prompt (WEIGHTS_FLOOR) is beyond numerics: the platform was shown to compute what the weights
  say;
- against the reference build (several builds, no reference stored for the cell; this module's
  `build_exactness`): the reference build's cell of the same mode and variant must have repeated itself prompt
  for prompt over at least two complete repeats in fresh processes (different PYTHONHASHSEED). That shows
  determinism, not that two builds compute alike (a release may change a kernel), so a stated floor applies:
  at least BUILDS_FLOOR_MIN prompts and BUILDS_FLOOR_SHARE of the prompts compared must count otherwise.
A cell whose drop the pooled checks already name (engine-below-reference, build-divergence) is not told twice.
Nothing here prints.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from mtpbench.judge.evidence import COUNT_COLS, CellResult, pos_cols
from mtpbench.judge.findings import Cause, Finding, Kind, Severity
from mtpbench.judge.findings.exactness import AGAINST_REFERENCE_BUILD, ExactnessLost

Pair = tuple[CellResult, CellResult]  # a cell of another build and the reference build's cell (judge/signals/builds.py)

# The fewest prompts an anchor must count exactly: a handful of short prompts can match by chance on a platform
# that is not bit-exact; the embedded pair's smallest published run has 20.
ANCHOR_MIN_PROMPTS = 5
# Against the weights, where an anchor showed the platform computes what the weights say: one prompt.
WEIGHTS_FLOOR = 1
# Against the reference build, where only its determinism was shown: at least two prompts and a tenth of the
# prompts compared (the measured edit moved 8 of 20).
BUILDS_FLOOR_MIN = 2
BUILDS_FLOOR_SHARE = 0.10
# How many inexact prompts a finding names (all are counted), as build-divergence names ten.
NAMED_PROMPTS = 10


@dataclass(frozen=True)
class PromptSide:
    """One cell's prompts as exactness reads them: per prompt id, the distinct counts (drafts, draft tokens,
    accepted, accepted per position) and texts (sha codes, run-wide) over its complete repeats, the number of
    observations, and the accepted tokens and draft steps summed over them."""

    counts: dict[str, set[tuple[int, ...]]]
    texts: dict[str, set[int]]
    observations: dict[str, int]
    accepted: dict[str, float]
    drafts: dict[str, float]
    repeats: int

    def al(self, prompts: Iterable[str]) -> float | None:
        """Pooled acceptance length over `prompts` (tokens per draft step)."""
        ps = list(prompts)
        drafts = sum(self.drafts[p] for p in ps)
        return 1 + sum(self.accepted[p] for p in ps) / drafts if drafts > 0 else None

    def per_step(self, prompt: str) -> float:
        d = self.drafts[prompt]
        return self.accepted[prompt] / d if d > 0 else 0.0


def prompt_side(cell: CellResult) -> PromptSide:
    obs = cell.observations
    k = cell.evidence.k
    names = [str(n) for n in cell.prompt_names[obs["prompt"].to_numpy()]] if len(obs) else []
    counts = obs[[*COUNT_COLS, *pos_cols(k)]].to_numpy(dtype=np.int64) if len(obs) else np.zeros((0, 0), int)
    shas = obs["sha"].to_numpy() if len(obs) else np.zeros(0, int)
    side = PromptSide({}, {}, {}, {}, {}, len(cell.used_repeats))
    for name, row, sha in zip(names, counts, shas, strict=True):
        side.counts.setdefault(name, set()).add(tuple(int(x) for x in row))
        side.texts.setdefault(name, set()).add(int(sha))
        side.observations[name] = side.observations.get(name, 0) + 1
        side.accepted[name] = side.accepted.get(name, 0.0) + float(row[COUNT_COLS.index("num_accepted_tokens")])
        side.drafts[name] = side.drafts.get(name, 0.0) + float(row[COUNT_COLS.index("num_drafts")])
    return side


def repeats_itself(side: PromptSide) -> bool:
    """At least two complete repeats, every prompt in each, one text and one set of counts per prompt."""
    return side.repeats >= 2 and all(
        side.observations[p] == side.repeats and len(side.counts[p]) == 1 and len(side.texts[p]) == 1
        for p in side.counts
    )


def floor_between_builds(compared: int) -> int:
    return max(BUILDS_FLOOR_MIN, math.ceil(BUILDS_FLOOR_SHARE * compared))


def al_change_pct(engine_al: float | None, reference_al: float | None) -> float | None:
    if engine_al is None or not reference_al:
        return None
    return 100 * (engine_al / reference_al - 1)


def build_exactness(pairs: list[Pair], tolerance_al_pct: float, skip: set[str]) -> list[Finding]:
    """Each (cell, reference build's cell) pair of a greedy run held prompt for prompt, where the reference
    build repeated itself exactly; `skip`: cells already judged otherwise (held against a stored reference, or
    a build-divergence named)."""
    out: list[Finding] = []
    for cell, ref in pairs:
        if cell.cell in skip or cell.counters_only or ref.counters_only:
            continue
        anchor = prompt_side(ref)
        if len(anchor.counts) < ANCHOR_MIN_PROMPTS or not repeats_itself(anchor):
            continue
        side = prompt_side(cell)
        compared = [p for p in side.counts if p in anchor.counts and side.texts[p] == anchor.texts[p]]
        inexact = [p for p in compared if side.counts[p] != anchor.counts[p]]
        floor = floor_between_builds(len(compared))
        if len(inexact) < floor:
            continue
        inexact.sort(key=lambda p: (side.per_step(p) - anchor.per_step(p), p))
        engine_al, reference_al = side.al(compared), anchor.al(compared)
        payload = ExactnessLost(
            against=AGAINST_REFERENCE_BUILD,
            build=cell.build,
            reference_build=ref.build,
            anchor=ref.cell,
            anchor_prompts=len(anchor.counts),
            anchor_repeats=anchor.repeats,
            prompts=len(compared),
            inexact=len(inexact),
            differing=inexact[:NAMED_PROMPTS],
            fewer=sum(side.per_step(p) < anchor.per_step(p) for p in inexact),
            engine_al=engine_al,
            reference_al=reference_al,
            al_change_pct=al_change_pct(engine_al, reference_al),
            tolerance_al_pct=tolerance_al_pct,
            floor=floor,
        )
        out.append(lost(cell.cell, payload))
    return out


def lost(cell: str, payload: ExactnessLost) -> Finding:
    return Finding(Kind.EXACTNESS_LOST, Severity.FAIL, cell, Cause.INEXACT_DRAFT_PATH, payload)
