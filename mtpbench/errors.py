"""Exit codes, the one policy that combines them, and the exceptions that map to them.

The CLI turns a `UserError` into one line on stderr and its exit code, never a traceback; any other
exception becomes exit 3 with the traceback in a log file (cli/__init__.py's root command, the one place either is
caught). Exit 1 means "regression" to every CI, so nothing but a finding of the gate ever produces it; the
code a failing finding gives is declared with its kind (judge/findings/__init__.py `Kind`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    REGRESSION = 1  # a regression or a named bug signature was found
    USAGE = 2  # bad input: config, prompts, results or baseline invalid
    RUN_FAILED = 3  # an engine crashed or timed out, repeats are incomplete, or mtpbench itself failed
    NOT_COMPARABLE = 4  # different model, method, k, prompts or sampling; a cell with no baseline entry
    INCONCLUSIVE = 5  # beyond the tolerance but not supported by the data, or too few prompts to tell


# When several findings disagree, the most specific evidence wins: a proven regression outranks "could
# not compare" and "could not tell", which outrank "some repeats did not finish" (exit 3 only when
# nothing else fails). USAGE never comes from findings: bad input stops before a verdict exists.
EXIT_PRECEDENCE: tuple[ExitCode, ...] = (
    ExitCode.REGRESSION,
    ExitCode.NOT_COMPARABLE,
    ExitCode.INCONCLUSIVE,
    ExitCode.RUN_FAILED,
    ExitCode.USAGE,
    ExitCode.OK,
)


def combine_exit_codes(codes: Iterable[ExitCode]) -> ExitCode:
    """The single exit-code policy: the highest-precedence code among the findings (OK when none)."""
    have = set(codes)
    return next((c for c in EXIT_PRECEDENCE if c in have), ExitCode.OK)


class UserError(Exception):
    """Bad input or usage. The message is the whole story: it names the file and what is wrong."""

    exit_code = ExitCode.USAGE


class NotComparableError(UserError):
    """Two results measure different things; comparing them would be a silent lie."""

    exit_code = ExitCode.NOT_COMPARABLE

    def __init__(
        self,
        message: str,
        run_id: str = "",
        baseline: str = "",
        reasons: Sequence[str] = (),
        unchecked: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.baseline = baseline
        self.reasons = list(reasons)
        self.unchecked = list(unchecked)


class StorageError(UserError):
    """Results could not be written (disk full, folder gone, permissions): the run cannot go on."""

    exit_code = ExitCode.RUN_FAILED


class ClusterError(UserError):
    """A Ray cluster could not be started, reached or used within its deadline: the run could not go on."""

    exit_code = ExitCode.RUN_FAILED


class PinError(UserError):
    """A build's pins cannot be installed as written: no index has a version that satisfies them (bad input,
    exit 2; `run --git-bisect` reads it as "this commit cannot be tested")."""


class ProvisionError(UserError):
    """A build's environment could not be installed (registry unreachable, disk full, the installer failed):
    the build cannot run. A pin that can never be satisfied is a `PinError` instead (exit 2)."""

    exit_code = ExitCode.RUN_FAILED


class DataWarning(UserWarning):
    """Something in stored results was skipped on purpose (a line cut off by a crash); shown as one line."""
