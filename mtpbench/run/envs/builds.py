"""The one place a config's builds become interpreters, before the runner plans a cell.

A build names an interpreter (`python:`, or none for mtpbench's own) or pins (`requirements:`). Pins are
provisioned here (run/envs/provision.py: cached by key, installed when missing) and the build gets a
`provisioned` entry with the environment's interpreter, key and vllm version; everything after this point
(planning, the device probe, the dry run, the manifest) reads `BuildSpec.interpreter()` and never installs.
`missing_method_library` asks each interpreter for what the speculative method imports beside vLLM.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mtpbench.config import ExperimentConfig
from mtpbench.run.envs.provision import (
    Installer,
    Progress,
    Provisioned,
    builds_root,
    cache_key,
    env_python,
    provision,
    python_facts,
    read_stamp,
)
from mtpbench.specs import BuildSpec, ProvisionedSpec


@dataclass(frozen=True)
class BuildState:
    """Where a requirements build stands without installing anything (for `--dry-run` and `build list`)."""

    name: str
    key: str
    path: Path
    ready: bool
    vllm: str | None


def build_state(name: str, spec: BuildSpec, root: Path | None = None) -> BuildState:
    """The cache entry a requirements build would use, and whether it is already there."""
    key = cache_key(spec, python_facts(spec.base_python))
    path = (root or builds_root()) / key
    stamp = read_stamp(path, key)
    return BuildState(name, key, path, stamp is not None, stamp.get("vllm") if stamp else None)


def resolve_build(
    name: str,
    spec: BuildSpec,
    *,
    root: Path | None = None,
    installer: Installer | None = None,
    on_step: Progress | None = None,
    on_output: Progress | None = None,
) -> tuple[BuildSpec, Provisioned | None]:
    """`spec` with its interpreter settled: a requirements build provisioned (or found in the cache) and
    given its `provisioned` entry; any other build as it is."""
    if not spec.from_pins:
        return spec, None
    done = provision(name, spec, root=root, installer=installer, on_step=on_step, on_output=on_output)
    entry = ProvisionedSpec(python=str(done.python), key=done.key, vllm=done.vllm)
    return spec.model_copy(update={"provisioned": entry}), done


def resolve_builds(
    cfg: ExperimentConfig,
    only: Iterable[str] | None = None,
    *,
    root: Path | None = None,
    installer: Installer | None = None,
    on_step: Progress | None = None,
    on_output: Progress | None = None,
) -> tuple[ExperimentConfig, list[Provisioned]]:
    """A copy of `cfg` whose requirements builds (those in `only`, when given: a run limited with --build
    installs nothing else) carry their environment, and what was provisioned, in the config's order."""
    wanted = set(only) if only is not None else None
    builds: dict[str, BuildSpec] = {}
    done: list[Provisioned] = []
    for name, spec in cfg.builds.items():
        if wanted is not None and name not in wanted:
            builds[name] = spec
            continue
        resolved, provisioned = resolve_build(
            name, spec, root=root, installer=installer, on_step=on_step, on_output=on_output
        )
        builds[name] = resolved
        if provisioned is not None:
            done.append(provisioned)
    return cfg.model_copy(update={"builds": builds}), done


def preview_builds(cfg: ExperimentConfig, root: Path | None = None) -> tuple[ExperimentConfig, list[BuildState]]:
    """For `--dry-run`: each requirements build given the interpreter it will have (its cache entry's,
    whether or not it is there yet), installing nothing; and where each stands."""
    builds: dict[str, BuildSpec] = {}
    states: list[BuildState] = []
    for name, spec in cfg.builds.items():
        if not spec.from_pins:
            builds[name] = spec
            continue
        state = build_state(name, spec, root)
        states.append(state)
        entry = ProvisionedSpec(python=str(env_python(state.path)), key=state.key, vllm=state.vllm)
        builds[name] = spec.model_copy(update={"provisioned": entry})
    return cfg.model_copy(update={"builds": builds}), states


def unresolved(cfg: ExperimentConfig, only: Iterable[str] | None = None) -> list[str]:
    """Requirements builds without an environment yet: planning one of them is a bug (resolve first)."""
    wanted = set(only) if only is not None else set(cfg.builds)
    return [n for n, b in cfg.builds.items() if n in wanted and b.from_pins and b.provisioned is None]


__all__ = ["BuildState", "build_state", "preview_builds", "resolve_build", "resolve_builds", "unresolved"]


# What a speculative method imports beside vLLM, and how mtpbench installs it: without it vLLM refuses at
# engine start (suffix: "Arctic Inference is required for suffix decoding", vllm/config/speculative.py lines
# 1596-1601 at v0.32.0), a failed cell (exit 3) after the engine's start-up instead of one line before it.
METHOD_LIBRARIES: dict[str, tuple[str, str]] = {
    "suffix": ("arctic_inference", "arctic-inference (mtpbench's suffix extra: pip install 'mtpbench[suffix]')"),
}


def missing_method_library(cfg: ExperimentConfig) -> str | None:
    """One line naming the first build whose interpreter has vLLM but lacks the library the config's method
    needs (None: every build has it, or the method needs none). An interpreter without vLLM runs no engine at
    all, which `mtpbench doctor` says (a core-only install plans and dry-runs every shipped config). A
    requirements build not provisioned yet is skipped: its interpreter does not exist until the run installs
    it. Looked up, not imported: milliseconds per build."""
    need = METHOD_LIBRARIES.get(cfg.speculative.method)
    if need is None:
        return None
    module, install = need
    probe = (
        "import importlib.util as u, sys; "
        f"sys.exit(u.find_spec('vllm') is not None and u.find_spec({module!r}) is None)"
    )
    for name, build in cfg.builds.items():
        if build.from_pins and build.provisioned is None:
            continue
        python = build.interpreter() or sys.executable
        env = {**os.environ, **build.env}
        try:
            found = subprocess.run([python, "-c", probe], env=env, capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            continue  # an interpreter that does not start is the cell's own failure to report, with its words
        if not found:
            return (
                f"method {cfg.speculative.method} needs {module}, which build {name}'s interpreter ({python}) "
                f"lacks: install {install}, or add it to the build's requirements"
            )
    return None
