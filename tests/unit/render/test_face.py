"""The render stage's package (render/__init__.py): importing the stage imports no renderer, no private name
crosses a module boundary into or out of render/, and every finding kind has a sentence in words/. The stages'
packages hold their map (a docstring) and no face (issue 36): a name is imported from its module."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from mtpbench.judge.findings import Kind
from mtpbench.render.words import MESSAGES

ROOT = Path(__file__).resolve().parents[3]
RENDER = ROOT / "mtpbench" / "render"


STAGES = ("judge", "render", "run", "engine")


def test_the_stage_packages_hold_a_map_and_no_face() -> None:
    # Issue 36: four lazy faces (PEP 562 `__getattr__` tables) were imported by nobody; a stage's package is
    # its docstring, and every caller imports a name from the module that defines it.
    for stage in STAGES:
        tree = ast.parse((ROOT / "mtpbench" / stage / "__init__.py").read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), stage
        assert [type(n).__name__ for n in tree.body] == ["Expr"], f"{stage}/__init__.py holds more than its map"


def test_importing_a_stage_imports_none_of_its_modules() -> None:
    code = (
        "import sys, mtpbench.render, mtpbench.judge, mtpbench.run, mtpbench.engine\n"
        "stages = tuple(f'mtpbench.{s}.' for s in " + repr(STAGES) + ")\n"
        "loaded = sorted(m for m in sys.modules if m.startswith((*stages, 'rich', 'pandas')))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _private_imports(path: Path) -> list[str]:
    """`from mtpbench… import _name` and `module._name` on an imported mtpbench module, in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: dict[str, str] = {}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mtpbench"):
            for a in node.names:
                modules[a.asname or a.name] = f"{node.module}.{a.name}"
                if a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"{path.name}:{node.lineno} {node.module}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("mtpbench"):
                    modules[a.asname or a.name.split(".")[0]] = a.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{path.name}:{node.lineno} {modules[node.value.id]}.{node.attr}")
    return found


def test_no_private_name_crosses_into_or_out_of_render() -> None:
    inside = [hit for p in sorted(RENDER.rglob("*.py")) for hit in _private_imports(p)]
    others = [p for p in sorted((ROOT / "mtpbench").rglob("*.py")) if RENDER not in p.parents]
    from_outside = [hit for p in others for hit in _private_imports(p) if " mtpbench.render." in hit]
    assert inside == []
    assert from_outside == []


def test_every_finding_kind_has_a_sentence() -> None:
    assert set(Kind) - set(MESSAGES) == set()
