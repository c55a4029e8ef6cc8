"""Fixtures every test folder shares, and the `slow` mark on engine tests. The helpers themselves live in
tests/support/ (import them as `from tests.support.<module> import ...`); the engine-run fixtures live in
tests/engine/conftest.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.synthetic_runs import write_run


@pytest.fixture
def make_run(tmp_path: Path) -> Callable[..., Path]:
    counter = iter(range(1000))

    def _make(cells: dict[str, list[list[float]]], **kw: Any) -> Path:
        return write_run(tmp_path / f"r{next(counter)}", cells, **kw)

    return _make


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every engine test is slow; so is everything under tests/engine/. `make fast` runs the rest.
    for item in items:
        if item.get_closest_marker("engine") or "tests/engine/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.slow)
