"""Fixtures every test folder shares, the `slow` mark on engine tests, and how the suite splits over
pytest-xdist's workers (`make test` runs `-n 2 --dist loadfile`: a file's tests on one worker, so a module's
run is made once). The helpers themselves live in
tests/support/ (import them as `from tests.support.<module> import ...`); the engine-run fixtures live in
tests/engine/conftest.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.synthetic_runs import write_run

# xdist hands its workers COLUMNS=80 and LINES=24 (its controller's terminal); a test run has no terminal,
# and the CLI's width rules (render/ci.py: a log is LOG_WIDTH wide) must see the same environment with or
# without workers.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

# Two engines at once: each worker's engines get the worker's share of the cores as unpinned OpenMP threads,
# what `mtpbench run --jobs N` gives its own workers (run/devices.py binding_env). Measured there (issue 37,
# docs/parallel.md): two workers on the 2-core box pinned to a core each took 1.9x the serial time, unpinned
# with one thread each 0.32x; an engine left to bind both cores spins against the other's. A binding the user
# set wins.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, _workers))))


@pytest.fixture
def make_run(tmp_path: Path) -> Callable[..., Path]:
    counter = iter(range(1000))

    def _make(cells: dict[str, list[list[float]]], **kw: Any) -> Path:
        return write_run(tmp_path / f"r{next(counter)}", cells, **kw)

    return _make


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every engine test is slow; so is everything under tests/engine/. `make fast` runs the rest.
    for item in items:
        if item.get_closest_marker("engine") or _file(item).startswith("tests/engine/"):
            item.add_marker(pytest.mark.slow)
    # The files that hold slow tests first, the longest first, so the longest work starts at once and the
    # quick tests fill the workers' last minutes (longest-first is what keeps one worker from starting a
    # four-minute file in the suite's last minute). A stable sort: every worker collects the same order, as
    # xdist requires.
    slow_files = {_file(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: _order(_file(item), slow_files))


# Seconds each of the longest files took in a fresh clone's `make test` (2026-12-06 09:34-09:57 UTC, three
# workers, the sum of its tests' set-up and calls from --durations): only an order, never an assertion. A slow
# file not listed here runs after these, before the quick ones.
LONGEST_FILES = {
    "tests/engine/test_selftest_engine.py": 620,
    "tests/engine/test_runner_engine.py": 460,
    "tests/engine/test_serving_engine.py": 440,
    "tests/engine/test_builds_engine.py": 320,
    "tests/engine/test_features_engine.py": 240,
    "tests/unit/run/test_ray_deadlines.py": 190,
    "tests/engine/test_class_selftest_engine.py": 116,
    "tests/cli/test_wheel.py": 100,
    "tests/engine/test_engine.py": 85,
    "tests/engine/test_serving_sweep_engine.py": 84,
}


def _order(file: str, slow_files: set[str]) -> tuple[int, int]:
    if file not in slow_files:
        return (2, 0)
    if file in LONGEST_FILES:
        return (0, -LONGEST_FILES[file])
    return (1, 0)


def _file(item: pytest.Item) -> str:
    return item.nodeid.replace("\\", "/").split("::")[0]
