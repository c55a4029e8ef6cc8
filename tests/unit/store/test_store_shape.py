"""The store stage's shape (issue 27): statuses are enums, not strings retyped; its face (store/__init__.py)
names its public functions; nothing imports a private name of it; no function is so long that its steps have
no names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import mtpbench.store as store_stage
from mtpbench.schema import CellStatus, RunStatus

REPO = Path(__file__).resolve().parents[3]
STAGE = REPO / "mtpbench" / "store"
STATUSES = {s.value for s in CellStatus} | {s.value for s in RunStatus}


def _code_constants(path: Path) -> list[ast.Constant]:
    """String constants of a module, its docstrings aside."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_status_is_a_string_literal_in_the_store() -> None:
    found = [
        f"{path.name}:{node.lineno} {node.value!r}"
        for path in sorted(STAGE.glob("*.py"))
        for node in _code_constants(path)
        if node.value in STATUSES
    ]
    assert found == []


def test_the_face_names_are_the_modules_own() -> None:
    for name in store_stage.__all__:
        value = getattr(store_stage, name)
        home = getattr(value, "__module__", None)
        if home is not None and home.startswith("mtpbench.store."):
            assert getattr(importlib.import_module(home), name) is value, name
    assert {"RunWriter", "load_run", "load_baseline", "write_json_atomic", "scan_records"} <= set(store_stage.__all__)


def test_no_private_name_of_the_store_is_imported_across_modules() -> None:
    found = []
    for folder in ("mtpbench", "tests", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mtpbench.store"):
                    found += [
                        f"{path.relative_to(REPO)}: {node.module}.{alias.name}"
                        for alias in node.names
                        if alias.name.startswith("_") and not alias.name.startswith("__")
                    ]
    assert found == []


def test_no_function_of_the_store_is_over_80_lines() -> None:
    found = []
    for path in sorted(STAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 80:
                    found.append(f"{path.name}:{node.name} {lines} lines")
    assert found == []


def test_the_stores_prompt_columns_are_named_once_from_the_record_type() -> None:
    # Issue 36: schema.PromptRecord, store/records.py PROMPT_COLUMNS and store/columnar.py _SCALARS named the
    # prompt fields three times; the store's lists now come from schema.py, checked against the record's keys.
    import pytest

    from mtpbench import schema
    from mtpbench.store import columnar, records

    assert tuple(records.PROMPT_COLUMNS) == schema.PROMPT_FRAME_COLUMNS
    assert columnar._SCALARS is schema.PROMPT_SCALAR_COLUMNS
    with pytest.raises(TypeError, match="num_draft"):
        schema._prompt_fields("cell", "num_draft")  # a misspelt field fails at import, not as an empty column
