"""The run stage's shape (issue 27): statuses are enums, not strings retyped; nothing imports a private name of
it; no function is so long that its steps have no names. (Its package holds its map and no face, issue 36:
tests/unit/render/test_face.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

from mtpbench.schema import CellStatus, RunStatus

REPO = Path(__file__).resolve().parents[3]
STAGE = REPO / "mtpbench" / "run"
# doctor.py and devices.py carry the doctor's own check statuses ("ok", "warn", "fail"), not a cell's.
OWN_STATUSES = {"doctor.py", "devices.py"}
MAX_FUNCTION_LINES = 80


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def status_literals(path: Path) -> list[str]:
    """`file:line value` of each string constant (docstrings aside) that spells a cell or run status."""
    values = {s.value for s in CellStatus} | {s.value for s in RunStatus}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    return [
        f"{path.name}:{node.lineno} {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in values and id(node) not in docs
    ]


def test_no_status_is_a_string_literal_in_the_run_stage() -> None:
    found = [hit for p in sorted(STAGE.rglob("*.py")) if p.name not in OWN_STATUSES for hit in status_literals(p)]
    assert found == []


def test_the_literal_finder_finds_one(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text('"""Says ok."""\nentry = {"status": "timeout"}\n', encoding="utf-8")
    assert status_literals(planted) == ["planted.py:2 'timeout'"]


def private_imports(root: Path, stages: tuple[str, ...]) -> list[str]:
    """`file: module._name` for each `from mtpbench.<stage>... import _name` under root (dunders aside)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if not node.module.startswith(tuple(f"mtpbench.{stage}" for stage in stages)):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(REPO)}: {node.module}.{alias.name}")
    return found


def test_no_private_name_of_the_run_stage_is_imported_across_modules() -> None:
    found = [hit for folder in ("mtpbench", "tests", "benchmarks") for hit in private_imports(REPO / folder, ("run",))]
    assert found == []


def long_functions(root: Path, limit: int) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.name}:{node.name} {lines} lines")
    return found


def test_no_function_of_the_run_stage_is_over_80_lines() -> None:
    # The scheduler (119 lines), supervise (96) and the Ray task's wait (72) were one piece each: now steps.
    assert long_functions(STAGE, MAX_FUNCTION_LINES) == []
