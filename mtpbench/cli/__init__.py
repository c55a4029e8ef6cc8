"""The `mtpbench` command line: parse, call one library function, render, map the outcome to an exit code.

This module is the dispatch: the one Typer `app`, the table that puts every command on it, and `main()`,
the console script. The commands live one module per group: cli/run_cmd.py (`run`, `run --resume`; with
cli/dry_run.py and cli/progress.py), cli/judge_cmds.py (`show`, `compare`, `size`, `report`, `history`),
cli/tool_cmds.py (`baseline save`, `doctor`, `selftest`; with cli/selftest.py), cli/reference_cmd.py
(`reference`: the acceptance recomputed from the weights, held against the engine's counts),
cli/build_cmds.py (`build prepare|list|remove`), cli/bisect_cmd.py (`bisect`). cli/common.py holds the
consoles and the mapping of a command's outcome to its exit code.

Errors are handled here and only here (asv's main.py): `_Root.invoke`, the root command every command runs
under, turns what a command returned or raised into its exit code (cli/common.py `command_exit_code`), so the
console script and typer's test runner see the same codes and lines; `main()` adds what happens outside any
command (a usage error, the help asked for by no arguments, a closed stdout).

Exit codes (errors.py, docs/verdicts.md): 0 pass, 1 regression or bug signature, 2 bad input, 3 run failed or
internal error, 4 not comparable, 5 inconclusive. A command returns its exit code; a `UserError` becomes one
line on stderr and its code; any other exception becomes one line naming a log file that holds the
traceback, and exit 3 — never 1, which means "regression" to every CI.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import sys
import warnings
from typing import Annotated, Any

# numpy asks the kernel for transparent huge pages for every large array (madvise) unless told not to,
# once, when it is imported. A command reads a run once and exits: on this project's 2-core VM the kernel's
# compaction for those pages cost 1-2 s of system time over 10⁶ records (`compare` 7.2 s → 5.1 s wall),
# far more than huge pages give back. Only this process: the variable is removed again at once, so the
# workers and servers a run starts inherit the user's own environment.
if "numpy" not in sys.modules and "NUMPY_MADVISE_HUGEPAGE" not in os.environ:
    os.environ["NUMPY_MADVISE_HUGEPAGE"] = "0"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["NUMPY_MADVISE_HUGEPAGE"]

import typer
from typer.core import TyperGroup

from mtpbench import __version__
from mtpbench.cli import bisect_cmd, build_cmds, judge_cmds, reference_cmd, run_cmd, tool_cmds
from mtpbench.cli.common import clickx, command_exit_code, console, say, show_warning, untyped_flags
from mtpbench.errors import ExitCode

__all__ = ["app", "main"]


class _Root(TyperGroup):
    """The root command: every command runs inside its `invoke`, which ends each one with typer.Exit(its exit
    code): a UserError one line and its code, anything unexpected exit 3 (cli/common.py command_exit_code)."""

    def invoke(self, ctx: typer.Context) -> Any:
        code = command_exit_code(lambda: super(_Root, self).invoke(ctx))
        raise typer.Exit(code)


app = typer.Typer(
    cls=_Root,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command and group inherits it
    help="Acceptance-rate regression bench and CI gate for speculative decoding on vLLM / vllm-ascend.",
)
baseline_app = typer.Typer(no_args_is_help=True, help="Make baselines from runs.")
app.add_typer(baseline_app, name="baseline")


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    warnings.showwarning = show_warning
    if version:
        console.print(f"mtpbench {__version__}")
        raise typer.Exit(0)


# Every command, in the order --help lists them; each module's functions parse, call the library, render.
app.command()(run_cmd.run)
app.command()(judge_cmds.show)
app.command("compare")(judge_cmds.compare_cmd)
app.command()(tool_cmds.doctor)
app.command()(tool_cmds.selftest)
app.command("size")(judge_cmds.size)
app.command("report")(judge_cmds.report_cmd)
app.command("history")(judge_cmds.history_cmd)
app.command("reference")(reference_cmd.reference_cmd)
app.command("bisect")(bisect_cmd.bisect)
baseline_app.command("save")(tool_cmds.baseline_save)
app.add_typer(build_cmds.build_app, name="build")
untyped_flags(app)


def main() -> None:
    """The console script. typer's standalone mode would print a usage error (an unknown option, a missing
    argument, a bad value) as a boxed multi-line panel; bad input is one line and exit 2 here, like every
    other error of mtpbench, and no click exception can exit 1 ("regression" to every CI)."""
    try:
        code = app(standalone_mode=False)
        sys.stdout.flush()  # what a command left buffered meets a closed pipe here, not at interpreter exit
    except clickx.NoArgsIsHelpError:  # `mtpbench` or `mtpbench baseline` alone: the help, then exit 2
        with contextlib.suppress(SystemExit):
            app([*sys.argv[1:], "--help"])
        code = int(ExitCode.USAGE)
    except clickx.ClickException as exc:
        where = exc.ctx.command_path if isinstance(exc, clickx.UsageError) and exc.ctx else "mtpbench"
        say(f"mtpbench: error: {exc.format_message()} (see: {where} --help)")
        code = int(ExitCode.USAGE)
    except typer.Abort:
        say("mtpbench: aborted")
        code = int(ExitCode.RUN_FAILED)
    except SystemExit as exc:
        # The one handler of a closed stdout (`mtpbench show --json | head`), in a command or outside one
        # (`--help | head`): typer and rich turn the broken pipe into a silent sys.exit(1), which is not a
        # regression but output that could not be written: exit 3. Anything else that exits keeps its code.
        ctx = exc.__context__
        if exc.code == 1 and isinstance(ctx, OSError) and ctx.errno == errno.EPIPE:
            code = int(ExitCode.RUN_FAILED)
        else:
            raise
    except BrokenPipeError:  # the flush above: the same closed stdout; the interpreter's own flush goes nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = int(ExitCode.RUN_FAILED)
    # At exit the interpreter's last garbage collections walk every object still alive (pandas, pyarrow,
    # a loaded run): 0.15-0.3 s of every command on a 2-core box, measured. Nothing is left that only a
    # collection would free or finish (files are closed, workers reaped; atexit and weakref finalizers run).
    # Not after triton was loaded (torch imports it: `reference`, a run's reference replay): triton's
    # extension is built with nanobind, which checks at interpreter exit that every object of its types
    # was freed and prints "nanobind: leaked …" for each one alive; frozen objects are never collected, so
    # every such command ended in ~30 lines of leak reports (issue 37). Such a command has spent seconds
    # in torch; the collections cost it nothing that matters. (nanobind's own switch, set_leak_warnings,
    # is a C++ call triton does not expose to Python.)
    if "triton" not in sys.modules:
        gc.freeze()
    sys.exit(code if isinstance(code, int) else 0)
