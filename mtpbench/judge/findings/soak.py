"""The soak workload's finding payloads (judge/signals/drift.py fills them): counts that moved between rounds of one
engine, a round that accepted nothing, a round past its deadline. Beside findings/__init__.py, whose Kind enum names
them."""

from __future__ import annotations

from dataclasses import dataclass, field

from mtpbench.judge.findings import OMIT_NONE, Payload


@dataclass(frozen=True, kw_only=True)
class Drift(Payload):
    """Counts that changed between rounds of one engine (a soak repeat). `exact` (greedy): a prompt's counts
    or text differ from its first round's; `change-point` (sampled): a permutation test across rounds."""

    method: str  # "exact" | "change-point"
    repeat: int
    hash_seed: int | None
    first_round: int  # the first round that moved (exact) or the first round after the change (change-point)
    rounds: int  # rounds recorded in that repeat
    prompts: int  # prompts compared across rounds
    rate_before: float | None  # mean acceptance (accepted / draft tokens) before, and at / after, the change
    rate_after: float | None
    moved: list[str] = field(default_factory=list)  # prompts that moved in first_round, the first ten sorted
    prompts_moved: int | None = field(default=None, metadata=OMIT_NONE)  # how many moved in first_round
    rounds_moved: list[int] | None = field(default=None, metadata=OMIT_NONE)
    same_text: bool | None = field(default=None, metadata=OMIT_NONE)
    pvalue: float | None = field(default=None, metadata=OMIT_NONE)
    false_alarm: float | None = field(default=None, metadata=OMIT_NONE)  # the test's level
    tolerance_pts: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True, kw_only=True)
class RoundSpeculationOff(Payload):
    """A soak round in which nothing was accepted, after round 0 accepted drafts (speculation off in-process)."""

    repeat: int
    hash_seed: int | None
    first_round: int
    rounds_off: list[int]
    rate_round0: float | None
    drafts: int  # drafts in the first such round (0: speculation did not run at all)


@dataclass(frozen=True, kw_only=True)
class Stall(Payload):
    """A soak round that ran past its deadline: the engine was stopped there and no later round was sent."""

    repeat: int
    hash_seed: int | None
    round: int
    deadline_s: float | None
    wall_s: float | None
    unfinished: int
    first_unfinished: list[str]
    uptime_s: float | None
    watchdog: bool  # the step loop never came back: the watchdog thread wrote the record
