"""What every command module shares: the consoles, `command_exit_code` (how the root command turns a command's
outcome into its exit code: the only place a `UserError` is caught, commands raise it and never catch it),
the one-line warnings, and the few output helpers more than one command group uses (an output file's folder, the
GitHub Actions publication of a verdict).

Exit codes (errors.py, docs/verdicts.md): a command returns its exit code; a `UserError` becomes one line on stderr
and its code; any other exception becomes one line naming a log file that holds the traceback, and exit 3 —
never 1, which means "regression" to every CI.
"""

from __future__ import annotations

import errno
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

# typer >= 0.26 vendors click as typer._click and no longer installs click; an older typer depends on click
# and raises click's own exceptions. Either way the exceptions come from what typer brings: mtpbench does not
# import click itself (a core-only install has no click).
try:
    from typer._click import exceptions as clickx
except ImportError:  # pragma: no cover
    from click import exceptions as clickx  # type: ignore[no-redef]

from mtpbench import __version__
from mtpbench.errors import DataWarning, ExitCode, UserError
from mtpbench.render.ci import make_console

if TYPE_CHECKING:
    from mtpbench.judge.compare import Comparison

__all__ = [
    "clickx",
    "command_exit_code",
    "console",
    "err_console",
    "make_parent",
    "publish_github",
    "say",
    "show_warning",
    "untyped_flags",
    "wide",
]

# Not a terminal (a CI log, a pipe): wide enough that no cell, number or verdict is ever cropped (ci.py).
console = make_console()
err_console = make_console(stderr=True)


def wide() -> bool:
    # The intervals widen the table past 80 columns: show them where they fit (--json always has them).
    return console.width >= 90


def say(line: str) -> None:
    """One line on stderr, as every error and warning of mtpbench is."""
    err_console.print(line, markup=False, highlight=False, soft_wrap=True)


def _crash_log(exc: BaseException) -> str:
    """Write the traceback of an unexpected error to a log file; where it went (or why it could not)."""
    folder = Path(os.environ.get("MTPBENCH_LOG_DIR") or Path(tempfile.gettempdir()) / "mtpbench-logs")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = folder / f"crash-{stamp}-{os.getpid()}.log"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        path.write_text(f"mtpbench {__version__}: {' '.join(sys.argv)}\n{text}", encoding="utf-8")
    except OSError as again:
        return f"the traceback could not be saved either: {again}"
    return f"traceback: {path}"


def command_exit_code(run: Callable[[], Any]) -> int:
    """A command's outcome as its exit code (asv's main.py pattern), for the root command's `invoke` (cli/__init__.py),
    the one place every command's errors are handled: a command returns its exit code (or raises typer.Exit);
    a UserError is one line and its code; an interrupt says what was kept; anything else is exit 3 with the
    traceback in a log file."""
    try:
        return int(run() or 0)
    except (typer.Exit, typer.Abort, clickx.ClickException):
        raise
    except UserError as exc:
        say(f"mtpbench: error: {exc}")
        return int(exc.exit_code)
    except KeyboardInterrupt as exc:
        # runner.RunInterrupted (a KeyboardInterrupt) carries the signal's code: 130 / 143 / 129.
        where = getattr(exc, "path", None)
        say("mtpbench: interrupted" + (f"; finished cell-repeats are kept in {where}" if where else ""))
        return int(getattr(exc, "exit_code", 130))
    except Exception as exc:  # the point: nothing unexpected may exit 1 or show a traceback
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
            raise  # stdout closed (`show --json | head`): main()'s quiet exit 3, for every command alike
        first = (str(exc).splitlines() or [""])[0][:300]
        say(f"mtpbench: internal error: {type(exc).__name__}: {first} ({_crash_log(exc)})")
        return int(ExitCode.RUN_FAILED)


_default_showwarning = warnings.showwarning


def show_warning(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    # What a loader skipped on purpose (a line cut off by a crash) is one line, like an error.
    if issubclass(category, DataWarning):
        err_console.print(f"mtpbench: warning: {message}", markup=False, highlight=False, soft_wrap=True)
    else:
        _default_showwarning(message, category, *args, **kwargs)


def make_parent(path: Path, what: str) -> None:
    """Every output file's folder is made if missing (as report, history and run make theirs)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot create the folder {path.parent}: {exc.strerror or exc}") from None


def publish_github(comp: Comparison, flag: bool) -> None:
    """Under GitHub Actions (or --github): Markdown verdict to the step summary, failing checks as ::error."""
    from mtpbench.render import ci, report  # report imports judge/ (pandas): only once a verdict exists

    if not ci.github_enabled(flag):
        return
    lines, note = ci.publish(comp, report.comparison_markdown(comp))
    for line in lines:  # workflow commands are read from stdout, one per line, never wrapped
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if note:
        err_console.print(f"mtpbench: {note}", markup=False, highlight=False)


def _untype(params: list[Any]) -> None:
    # typer 0.29 prints a flag's Python type beside it in --help (`--version <bool>`), as if it took a
    # value; a flag takes none, so its type column stays empty (an empty metavar is what typer shows).
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""


class _UntypedFlags:
    """Mixed into typer's command and group classes: their flags, the help option included, untyped."""

    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _untype(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        _untype([option])
        return option


class _FlagsCommand(_UntypedFlags, TyperCommand):
    pass


class _FlagsGroup(_UntypedFlags, TyperGroup):
    pass


def untyped_flags(app: typer.Typer) -> None:
    """Every command and group of `app` (sub-apps included) shows its flags without a `<bool>` type; a group
    class of the app's own (the root command's, which handles every command's errors) keeps its behaviour."""
    own = app.info.cls
    if isinstance(own, type) and issubclass(own, TyperGroup) and own is not TyperGroup:
        app.info.cls = type(f"_Flags{own.__name__}", (_UntypedFlags, own), {})
    else:
        app.info.cls = _FlagsGroup
    for command in app.registered_commands:
        command.cls = _FlagsCommand
    for group in app.registered_groups:
        if group.typer_instance is not None:
            untyped_flags(group.typer_instance)
