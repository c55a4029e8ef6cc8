"""Fixtures every test folder shares, the `slow` mark on engine tests, and how the suite splits over
pytest-xdist's workers (`make test` runs `-n 2 --dist loadgroup`). The helpers themselves live in
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

# Files whose tests must share one worker: one session-wide run (the selftest and the soak it makes), the
# Ray clusters (started and stopped on this machine), and the builds provisioned into the shared cache (3 GB
# copies: two at once only thrash the disk). Every other file is a group of its own, so a module-scoped run
# is made once, by one worker.
WORKER_GROUPS = {
    "selftest": (
        "tests/engine/test_engine.py",
        "tests/engine/test_soak_engine.py",
        "tests/engine/test_reference_engine.py",
    ),
    "ray": (
        "tests/engine/test_runner_engine.py",
        "tests/unit/run/test_ray_deadlines.py",
        "tests/unit/run/test_rayauth.py",
    ),
    "builds": (
        "tests/engine/test_class_selftest_engine.py",
        "tests/engine/test_builds_engine.py",
        "tests/unit/run/test_build_contamination.py",
        "tests/unit/run/test_provision.py",
    ),
}
_GROUP_OF = {path: group for group, paths in WORKER_GROUPS.items() for path in paths}


@pytest.fixture
def make_run(tmp_path: Path) -> Callable[..., Path]:
    counter = iter(range(1000))

    def _make(cells: dict[str, list[list[float]]], **kw: Any) -> Path:
        return write_run(tmp_path / f"r{next(counter)}", cells, **kw)

    return _make


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every engine test is slow; so is everything under tests/engine/. `make fast` runs the rest.
    for item in items:
        path = item.nodeid.replace("\\", "/").split("::")[0]
        if item.get_closest_marker("engine") or path.startswith("tests/engine/"):
            item.add_marker(pytest.mark.slow)
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(_GROUP_OF.get(path, path)))
    # The groups that hold slow tests first, so the longest work starts at once and the quick tests fill the
    # workers' last minutes (a stable sort: every worker collects the same order, as xdist requires).
    slow_groups = {_group(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: _group(item) not in slow_groups)


def _group(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0]) if mark and mark.args else ""
