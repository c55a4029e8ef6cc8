"""Bisect: the first bad build of an ordered list, by binary search, each build judged by a caller's test.

The builds are a config's, in their listed order (releases oldest first, or any pinned builds: wheels, VCS
pins). The caller's `test(build)` measures the build (or reuses cells already measured) and judges it
against the good build with the gate's own rule, answering good, bad or untestable (the install or the
engine failed, or the evidence cannot decide). First the ends are checked: the good build must test good
(against the config's baseline, when it has one) and the bad one bad, else the search cannot mean
anything and ends with why (exit 4). Between them the search halves the range; an untestable build is
skipped for its nearest untested neighbour, as `git bisect skip` does. With N builds from first to last it
runs at most ⌈log2 N⌉ + 2 of them (the two ends, then ⌈log2 (N - 1)⌉ halvings).

`git_bisect_code` maps a gate's exit code onto `git bisect run`'s convention, for `mtpbench run
--git-bisect` inside a vLLM checkout: 0 good, 1 bad, 125 cannot test, 128 stop (bad input would otherwise
mark every commit bad).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from mtpbench.errors import ExitCode, NotComparableError, UserError


class Outcome(str, Enum):
    GOOD = "good"
    BAD = "bad"
    UNTESTABLE = "untestable"


@dataclass(frozen=True)
class Judged:
    """One build's verdict, with the evidence a reader needs (positions, Δ, prompts) already in words."""

    build: str
    outcome: Outcome
    why: str = ""
    measured: bool = True  # False when the cells were already in a run and only judged


@dataclass
class BisectResult:
    first_bad: str | None
    last_good: str | None
    tested: list[Judged] = field(default_factory=list)
    # Builds between last_good and first_bad that could not be tested: the first bad one is among them.
    skipped: list[str] = field(default_factory=list)

    @property
    def builds_run(self) -> int:
        return sum(1 for t in self.tested if t.measured)

    def evidence(self) -> str:
        hit = next((t for t in self.tested if t.build == self.first_bad), None)
        return hit.why if hit else ""


def max_builds(n: int) -> int:
    """The most builds a search over n listed builds tests (the ends included)."""
    return math.ceil(math.log2(n)) + 2 if n > 1 else n


# `git bisect run`'s "this commit cannot be tested" (anything from 1 to 127 but 125 means bad).
GIT_BISECT_SKIP = 125


def git_bisect_code(code: ExitCode) -> int:
    """`git bisect run`'s reading of a gate's exit code: 0 good, 1 bad, 125 skip, 128 abort."""
    if code == ExitCode.OK:
        return 0
    if code == ExitCode.REGRESSION:
        return 1
    if code == ExitCode.USAGE:
        return 128  # a bad config is bad on every commit: stop instead of marking them all bad
    return GIT_BISECT_SKIP  # run failed, not comparable, inconclusive: this commit cannot say


def search(
    builds: Sequence[str],
    good: str,
    bad: str,
    test: Callable[[str], Judged],
    check_good: Callable[[], Judged],
) -> BisectResult:
    """The first bad build between `good` and `bad` (in `builds`' order). `check_good()` measures the good
    build and judges it (against the config's baseline when there is one; else it must have drafted at
    all); `test(b)` judges build b against the good build."""
    order = list(builds)
    if len(order) < 2:
        raise UserError(
            f"bisect searches between builds and the config lists one ({order[0]}): list the builds to "
            "search under builds:, oldest first"
        )
    for name, what in ((good, "--good"), (bad, "--bad")):
        if name not in order:
            raise UserError(f"{what} {name}: not a build of the config (builds: {', '.join(order)})")
    if good == bad:
        raise UserError(f"--good and --bad are the same build ({good}): name a good build and a later bad one")
    lo, hi = order.index(good), order.index(bad)
    if lo > hi:
        raise UserError(f"--good {good} must come before --bad {bad} in the config's builds")
    result = BisectResult(None, None)
    verdict = check_good()
    result.tested.append(verdict)
    if verdict.outcome is not Outcome.GOOD:
        raise NotComparableError(f"bisect: the good build {good} is not good: {verdict.why}")
    end = test(bad)
    result.tested.append(end)
    if end.outcome is not Outcome.BAD:
        said = "untestable" if end.outcome is Outcome.UNTESTABLE else "not worse than the good build"
        raise NotComparableError(f"bisect: the bad build {bad} is {said}: {end.why}")
    skipped: set[int] = set()
    while True:
        inside = [i for i in range(lo + 1, hi) if i not in skipped]
        if not inside:
            break
        mid = (lo + hi) // 2
        # The untested build nearest the middle (the middle itself unless it was skipped), earlier first.
        pick = min(inside, key=lambda i: (abs(i - mid), i))
        verdict = test(order[pick])
        result.tested.append(verdict)
        if verdict.outcome is Outcome.BAD:
            hi = pick
        elif verdict.outcome is Outcome.GOOD:
            lo = pick
        else:
            skipped.add(pick)
    result.first_bad, result.last_good = order[hi], order[lo]
    result.skipped = [order[i] for i in sorted(skipped) if lo < i < hi]
    return result


__all__ = ["GIT_BISECT_SKIP", "BisectResult", "Judged", "Outcome", "git_bisect_code", "max_builds", "search"]
