"""The one way the CLI tests run a command in this process: typer's CliRunner on the real `app`, with a
fixed terminal width so rich output is stable (fastapi-cli's pattern), and the check that an error is one
line on stderr with no traceback."""

from __future__ import annotations

from typer.testing import CliRunner, Result

from mtpbench.cli import app

WIDTH = {"MTPBENCH_WIDTH": "200", "COLUMNS": "200"}


def invoke(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args], env=WIDTH)


def one_error_line(result: Result) -> str:
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]
