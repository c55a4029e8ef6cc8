"""What the engine tests share besides their fixtures (tests/engine/conftest.py): `mtpbench`, the command line in a
subprocess with this checkout's package; `EngineRuns`, the factory behind the `engine_runs` fixture, which makes
each distinct `mtpbench run` once; `tiny_config`, a shipped config as data with the embedded pair's paths."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp"
TINY = REPO / "configs" / "tiny-gemma4-mtp.yaml"


def mtpbench(
    *args: object, width: int = 200, timeout: float | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """`python -m mtpbench ARGS` with this checkout's mtpbench, its terminal `width` columns wide."""
    env = {
        **os.environ,
        "MTPBENCH_WIDTH": str(width),
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
    }
    return subprocess.run(
        [sys.executable, "-m", "mtpbench", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def run_folders(out: Path) -> list[Path]:
    """The run folders under `out` (a run folder is one with a manifest)."""
    return [p for p in out.iterdir() if (p / "manifest.json").exists()] if out.is_dir() else []


def tiny_config(path: Path = TINY) -> dict[str, Any]:
    """A shipped config as data, its model and drafter as absolute paths to the embedded pair (a patched copy
    is written elsewhere, where the config's relative paths would point nowhere)."""
    cfg: dict[str, Any] = yaml.safe_load(path.read_text())
    cfg["model"] = str(PAIR / "target")
    cfg["speculative"]["model"] = str(PAIR / "assistant")
    return cfg


@dataclass(frozen=True)
class EngineRun:
    """What one `mtpbench run` gave: the finished process (exit code, stdout, stderr) and its run folder."""

    result: subprocess.CompletedProcess[str]
    path: Path

    def tail(self) -> str:
        """The end of what the run printed: the message of an assertion on its exit code."""
        return self.result.stdout[-3000:] + self.result.stderr[-3000:]


class EngineRuns:
    """Makes each distinct run once per session; a second request for the same config and command line gets
    the first run back."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[str, EngineRun] = {}

    def run(
        self, config: dict[str, Any] | Path, *args: object, width: int = 200, timeout: float | None = None
    ) -> EngineRun:
        """`mtpbench run CONFIG --out OUT ARGS`, made at most once. CONFIG: a config file run where it lies (its
        relative paths as they are), or a config as data, written as YAML to a folder of the run's own."""
        text = config.read_text() if isinstance(config, Path) else yaml.safe_dump(config, sort_keys=True)
        argv = [str(a) for a in args]
        where = str(config) if isinstance(config, Path) else ""
        key = hashlib.sha256(json.dumps([where, text, argv, width]).encode()).hexdigest()[:12]
        if key not in self.made:
            name = config.stem if isinstance(config, Path) else config.get("name", "run")
            folder = self.root / f"{name}-{key}"
            folder.mkdir(parents=True)
            path = config if isinstance(config, Path) else folder / "config.yaml"
            if not isinstance(config, Path):
                path.write_text(text)
            result = mtpbench("run", path, "--out", folder / "runs", *argv, width=width, timeout=timeout)
            runs = run_folders(folder / "runs")
            assert len(runs) == 1, result.stdout[-3000:] + result.stderr[-3000:]
            self.made[key] = EngineRun(result, runs[0])
        return self.made[key]


@dataclass(frozen=True)
class Selftest:
    """`mtpbench selftest`'s process and its two run folders: the flattening check and its soak."""

    result: subprocess.CompletedProcess[str]
    path: Path
    soak: Path
