"""The tests' own house (issue 36): what tests share lives in tests/support/ and is imported one way,
`from tests.support.<module> import ...`; nothing else is loose at the top of tests/, and no test imports a
conftest (pytest loads those; importing one loads it a second time under another name)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# The helpers' names, now and before they moved (a test still written against an old name fails here).
BARE = {p.stem for p in (TESTS / "support").glob("*.py")} | {
    "browser",
    "clihelp",
    "fake_uv",
    "fake_worker",
    "probefake",
    "referencehelp",
    "runfake",
    "servingfake",
    "stub_api_server",
}


def test_only_the_conftest_and_the_package_marker_sit_at_the_top_of_tests() -> None:
    assert sorted(p.name for p in TESTS.glob("*.py")) == ["__init__.py", "conftest.py"]


def _imported(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def test_helpers_are_imported_from_tests_support_and_no_conftest_is_imported() -> None:
    wrong = [
        f"{path.relative_to(TESTS)}: {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for name in _imported(path)
        if name.split(".")[0] in BARE
        or name == "conftest"
        or name.endswith(".conftest")
        or (name.startswith("tests.") and not name.startswith("tests.support"))
    ]
    assert wrong == []
