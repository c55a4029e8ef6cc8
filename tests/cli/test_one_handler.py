"""One error handler (issue 36): a command's errors are caught in one place, the root command's `invoke`
(cli/__init__.py, through cli/common.py `command_exit_code`), not by a decorator on each command; a command
reached through a sub-group (`build …`) meets the same handler as a top-level one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.clihelp import invoke, one_error_line

CLI = Path(__file__).resolve().parents[2] / "mtpbench" / "cli"


def _is_command(node: ast.FunctionDef) -> bool:
    """A Typer command: a parameter annotated with typer.Option or typer.Argument."""
    return any("typer." in ast.unparse(a.annotation) for a in node.args.args if a.annotation is not None)


def test_no_command_carries_its_own_error_handler() -> None:
    decorated = [
        f"{p.name}:{node.lineno} {node.name}"
        for p in sorted(CLI.glob("*.py"))
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef)
        and _is_command(node)
        # registering on a Typer app (`@app.callback`) is not handling anything
        and any(not ast.unparse(d).split(".")[0].endswith("app") for d in node.decorator_list)
    ]
    assert decorated == []
    assert (
        sum(
            _is_command(n)
            for p in CLI.glob("*.py")
            for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.FunctionDef)
        )
        >= 14
    )


def test_a_sub_groups_command_meets_the_same_handler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `build remove` of a key that is not there: a UserError raised inside the `build` group's command.
    monkeypatch.setenv("MTPBENCH_CACHE_DIR", str(tmp_path))
    result = invoke("build", "remove", "no-such-key")
    assert result.exit_code == 2, result.output
    assert one_error_line(result).startswith("mtpbench: error:")


def test_the_root_command_keeps_the_handler_under_every_help_change() -> None:
    # After the merge of issue 37's help words, the root group's class was replaced by a help mixin and every
    # UserError escaped as exit 1 ("regression"): the root command must still be the handler's class.
    from typer.main import get_command

    from mtpbench.cli import _Root, app

    assert isinstance(get_command(app), _Root)
