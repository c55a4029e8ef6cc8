"""The one place a config's builds become interpreters, before the runner plans a cell.

A build names an interpreter (`python:`, or none for mtpbench's own) or pins (`requirements:`). Pins are
provisioned here (run/envs/provision.py: cached by key, installed when missing) and the build gets a
`provisioned` entry with the environment's interpreter, key and vllm version; everything after this point
(planning, the device probe, the dry run, the manifest) reads `BuildSpec.interpreter()` and never installs.
"""

from __future__ import annotations

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
