"""Bisect's search (issue 28) on ordered builds with a planted first bad one: it finds it within
⌈log2 N⌉ + 2 builds tested, skips untestable ones like `git bisect skip`, refuses ends that are not good
and bad (exit 4), and maps a gate's exit code onto `git bisect run`'s convention."""

from __future__ import annotations

import math

import pytest

from mtpbench.errors import ExitCode, NotComparableError, UserError
from mtpbench.run.bisect import Judged, Outcome, git_bisect_code, max_builds, search

RELEASES = ["v0.27.1", "v0.28.0", "v0.29.0", "v0.30.0", "v0.31.0", "v0.32.0"]


def planted(builds: list[str], first_bad: int, untestable: set[str] = frozenset()) -> tuple[list[str], object]:
    seen: list[str] = []

    def test(build: str) -> Judged:
        seen.append(build)
        if build in untestable:
            return Judged(build, Outcome.UNTESTABLE, "engine failed")
        bad = builds.index(build) >= first_bad
        return Judged(build, Outcome.BAD if bad else Outcome.GOOD, "pos2 -30.0 pts on 150 prompts" if bad else "")

    return seen, test


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33])
def test_the_planted_build_is_found_within_the_bound(n: int) -> None:
    builds = [f"b{i}" for i in range(n)]
    assert max_builds(n) == math.ceil(math.log2(n)) + 2
    for first_bad in range(1, n):
        seen, test = planted(builds, first_bad)
        res = search(builds, builds[0], builds[-1], test, lambda: Judged(builds[0], Outcome.GOOD))
        assert res.first_bad == builds[first_bad] and res.last_good == builds[first_bad - 1]
        assert res.builds_run == len(seen) + 1 <= max_builds(n)
        assert builds[0] not in seen  # the good build is the reference, judged once by check_good


def test_the_six_releases_take_at_most_five_builds() -> None:
    seen, test = planted(RELEASES, RELEASES.index("v0.30.0"))
    res = search(RELEASES, "v0.27.1", "v0.32.0", test, lambda: Judged("v0.27.1", Outcome.GOOD))
    assert (
        res.first_bad == "v0.30.0"
        and res.builds_run == len(seen) + 1 <= 5
        and res.evidence() == "pos2 -30.0 pts on 150 prompts"
    )


def test_an_untestable_build_is_skipped_for_its_neighbour() -> None:
    seen, test = planted(RELEASES, RELEASES.index("v0.31.0"), {"v0.29.0"})
    res = search(RELEASES, "v0.27.1", "v0.32.0", test, lambda: Judged("v0.27.1", Outcome.GOOD))
    assert res.first_bad == "v0.31.0" and res.skipped == [] and "v0.29.0" in seen and "v0.28.0" in seen
    # When the only build between the last good and the first bad cannot be tested, it is named.
    seen, test = planted(RELEASES, RELEASES.index("v0.30.0"), {"v0.30.0"})
    res = search(RELEASES, "v0.27.1", "v0.32.0", test, lambda: Judged("v0.27.1", Outcome.GOOD))
    assert (res.last_good, res.first_bad, res.skipped) == ("v0.29.0", "v0.31.0", ["v0.30.0"])


def test_ends_that_are_not_good_and_bad_stop_the_search() -> None:
    _, test = planted(RELEASES, len(RELEASES))  # nothing is bad
    with pytest.raises(NotComparableError, match=r"the bad build v0\.32\.0 is not worse than the good build"):
        search(RELEASES, "v0.27.1", "v0.32.0", test, lambda: Judged("v0.27.1", Outcome.GOOD))
    with pytest.raises(NotComparableError, match=r"the good build v0\.27\.1 is not good: pos0 -9"):
        search(RELEASES, "v0.27.1", "v0.32.0", test, lambda: Judged("v0.27.1", Outcome.BAD, "pos0 -9"))
    assert NotComparableError("").exit_code == ExitCode.NOT_COMPARABLE
    with pytest.raises(UserError, match=r"--good v0\.26\.0: not a build of the config"):
        search(RELEASES, "v0.26.0", "v0.32.0", test, lambda: Judged("v0.26.0", Outcome.GOOD))
    with pytest.raises(UserError, match="must come before"):
        search(RELEASES, "v0.32.0", "v0.27.1", test, lambda: Judged("v0.32.0", Outcome.GOOD))


def test_git_bisect_run_reads_the_gate() -> None:
    codes = {c: git_bisect_code(c) for c in ExitCode}
    assert codes == {
        ExitCode.OK: 0,
        ExitCode.REGRESSION: 1,
        ExitCode.USAGE: 128,
        ExitCode.RUN_FAILED: 125,
        ExitCode.NOT_COMPARABLE: 125,
        ExitCode.INCONCLUSIVE: 125,
    }


def test_one_build_or_the_same_good_and_bad_names_the_real_problem_not_the_order() -> None:
    # Issue 37 item 18: both read "--good X must come before --bad X", which is no order problem at all.
    _, test = planted(RELEASES, 3)
    with pytest.raises(UserError, match=r"the config lists one \(current\): list the builds") as one:
        search(["current"], "current", "current", test, lambda: Judged("current", Outcome.GOOD))
    with pytest.raises(UserError, match=r"--good and --bad are the same build \(v0\.29\.0\)") as same:
        search(RELEASES, "v0.29.0", "v0.29.0", test, lambda: Judged("v0.29.0", Outcome.GOOD))
    assert "must come before" not in str(one.value) + str(same.value)
