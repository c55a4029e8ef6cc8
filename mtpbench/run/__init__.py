"""Planning and executing the matrix: cells, schedule, executors (local, device pool, Ray), devices, doctor.
Writes the manifest (through the store's RunWriter); the engine writes the records.

The stage's face, by what a caller wants:
- plan: `expand` a config into cell-repeats (`Cell`), `plan` each (`CellPlan`), `engine_args_for` a mode,
  `estimate` what a run will cost (cells.py, cost.py);
- run: `execute` a new run or `resume` one (`load_for_resume` reads it back), steered by `RunOptions` and
  `StopSignals`, ending in a `RunOutcome` or `RunInterrupted`; `time_breakdown` says where its time went
  (runner.py, control.py, cost.py);
- execute one worker: `make_executor` (`LocalExecutor`, `RayExecutor`), `supervise`, `kill_group`,
  `WorkerSpec` (executors.py); reach a Ray cluster: `join`, `RaySettings`, `RayDeadlines`, `fit_problem`
  (raycluster.py); a worker's PYTHONPATH: `worker_pythonpath`, `user_pythonpath` (pythonpath.py);
- builds: `resolve_builds` (a config's builds from pins given their environments, before planning),
  `preview_builds` and `build_state` (where they stand, installing nothing), `unresolved` (builds.py);
  one build's environment (`Provisioned`, from provision.py's `provision`, named by module), the cache's
  entries (`list_cached`, `remove_cached`, `CacheEntry`, `builds_root`; provision.py), the installer
  (`default_installer`, `Installer`; installers.py);
- bisect: `search` an ordered list of builds for the first bad one (`Judged`, `Outcome`, `BisectResult`,
  `max_builds`), `git_bisect_code` (bisect.py).
doctor.py, devices.py and rayauth.py (who may use a Ray cluster: its token, its exposure) are imported by module name.

Each name's module is imported when the name is first asked for (PEP 562): `python -m mtpbench.run.raykeeper`
imports this package before the keeper runs, and the keeper, alive as long as its cluster, stays a small
standard-library process instead of loading the whole stage (pydantic, pandas) for nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for type checkers and the layering test (tests/project/test_layout.py)
    from mtpbench.run.bisect import BisectResult, Judged, Outcome, git_bisect_code, max_builds, search
    from mtpbench.run.builds import BuildState, build_state, preview_builds, resolve_builds, unresolved
    from mtpbench.run.cells import Cell, CellPlan, RunOutcome, engine_args_for, expand, plan
    from mtpbench.run.control import LOCK, RERUN, STOP_SIGNALS, RunInterrupted, RunOptions, StopSignals
    from mtpbench.run.cost import Estimate, estimate, time_breakdown
    from mtpbench.run.executors import LocalExecutor, RayExecutor, WorkerSpec, kill_group, make_executor, supervise
    from mtpbench.run.installers import Installer, default_installer
    from mtpbench.run.provision import CacheEntry, Provisioned, builds_root, list_cached, remove_cached
    from mtpbench.run.pythonpath import user_pythonpath, worker_pythonpath
    from mtpbench.run.raycluster import RayDeadlines, RaySettings, fit_problem, join
    from mtpbench.run.runner import EventCallback, execute, load_for_resume, resume

# Where each public name lives (a module of this package).
_HOMES: dict[str, tuple[str, ...]] = {
    "bisect": ("BisectResult", "Judged", "Outcome", "git_bisect_code", "max_builds", "search"),
    "builds": ("BuildState", "build_state", "preview_builds", "resolve_builds", "unresolved"),
    "cells": ("Cell", "CellPlan", "RunOutcome", "engine_args_for", "expand", "plan"),
    "control": ("LOCK", "RERUN", "STOP_SIGNALS", "RunInterrupted", "RunOptions", "StopSignals"),
    "cost": ("Estimate", "estimate", "time_breakdown"),
    "installers": ("Installer", "default_installer"),
    "provision": ("CacheEntry", "Provisioned", "builds_root", "list_cached", "remove_cached"),
    "executors": ("LocalExecutor", "RayExecutor", "WorkerSpec", "kill_group", "make_executor", "supervise"),
    "pythonpath": ("user_pythonpath", "worker_pythonpath"),
    "raycluster": ("RayDeadlines", "RaySettings", "fit_problem", "join"),
    "runner": ("EventCallback", "execute", "load_for_resume", "resume"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "LOCK",
    "RERUN",
    "STOP_SIGNALS",
    "BisectResult",
    "BuildState",
    "CacheEntry",
    "Cell",
    "CellPlan",
    "Estimate",
    "EventCallback",
    "Installer",
    "Judged",
    "LocalExecutor",
    "Outcome",
    "Provisioned",
    "RayDeadlines",
    "RayExecutor",
    "RaySettings",
    "RunInterrupted",
    "RunOptions",
    "RunOutcome",
    "StopSignals",
    "WorkerSpec",
    "build_state",
    "builds_root",
    "default_installer",
    "engine_args_for",
    "estimate",
    "execute",
    "expand",
    "fit_problem",
    "git_bisect_code",
    "join",
    "kill_group",
    "list_cached",
    "load_for_resume",
    "make_executor",
    "max_builds",
    "plan",
    "preview_builds",
    "remove_cached",
    "resolve_builds",
    "resume",
    "search",
    "supervise",
    "time_breakdown",
    "unresolved",
    "user_pythonpath",
    "worker_pythonpath",
]


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:  # also how `from mtpbench.run import runner` learns to import the submodule
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
