"""The exceptions that map to exit codes: the CLI turns each into one line on stderr, never a traceback."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    REGRESSION = 1  # a regression or a named bug signature was found
    USAGE = 2  # bad input: config, prompts, results or baseline invalid
    RUN_FAILED = 3  # an engine crashed or timed out; partial results are kept
    NOT_COMPARABLE = 4  # different model, method, k, prompts or sampling


class UserError(Exception):
    """Bad input or usage. The message is the whole story: it names the file and what is wrong."""

    exit_code = ExitCode.USAGE


class NotComparableError(UserError):
    """Two results measure different things; comparing them would be a silent lie."""

    exit_code = ExitCode.NOT_COMPARABLE


class StorageError(UserError):
    """Results could not be written (disk full, folder gone, permissions): the run cannot go on."""

    exit_code = ExitCode.RUN_FAILED


class DataWarning(UserWarning):
    """Something in stored results was skipped on purpose (a line cut off by a crash); shown as one line."""
