"""Runs made by the runner with tests/support/fake_worker.py standing in for the worker: a config, the runner
called as the CLI calls it, and readers of what it wrote (shared by the runner, Ray, CI-recipe and CLI tests)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from mtpbench.config import load_config, load_prompts
from mtpbench.run import runner
from mtpbench.store.results import load_run

REPO = Path(__file__).resolve().parents[2]


FAKE = REPO / "tests" / "support" / "fake_worker.py"


def fake_config(tmp: Path, builds: dict[str, dict[str, Any]], prompts: int = 2, **extra: Any) -> Path:
    """A config whose builds run the fake worker; `builds` maps a build name to its FAKE behaviour."""
    py = tmp / "fakepy"
    # The runner calls `<python> -m mtpbench.engine.worker JOB`: the fake answers it. Anything else (device and
    # platform probes, `-c` or `-m` another module) runs in the real interpreter.
    py.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-m" ] && [ "$2" = "mtpbench.engine.worker" ]; then exec {sys.executable} {FAKE} "$@"; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    py.chmod(0o755)
    marks = tmp / "marks"
    marks.mkdir(exist_ok=True)
    (tmp / "prompts.yaml").write_text(
        yaml.safe_dump({"name": "p", "prompts": [{"id": f"p{i}", "text": f"t{i}"} for i in range(prompts)]})
    )
    env = {"FAKE_MARK_DIR": str(marks)}
    cfg: dict[str, Any] = {
        "name": "fake",
        "model": "fake-model",
        "speculative": {"method": "mtp", "num_speculative_tokens": 3},
        "prompts": "prompts.yaml",
        "repeats": 1,
        "builds": {
            name: {"python": str(py), "env": {"FAKE": json.dumps(b), **env}, "device_env": "FAKE_DEVICES"}
            for name, b in builds.items()
        },
        **extra,
    }
    path = tmp / "fake.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def execute(config: Path, out: Path, **opts: Any) -> runner.RunOutcome:
    cfg = load_config(config)
    return runner.execute(
        cfg, load_prompts(cfg.prompts), out, str(config), runner.expand(cfg), options=runner.RunOptions(**opts)
    )


def only_run(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if (p / "manifest.json").exists()]
    return run


def prompt_totals(run: Path) -> dict[tuple[str, int], list[int]]:
    tot: dict[tuple[str, int], list[int]] = {}
    for r in load_run(run).records:
        if r["type"] == "prompt":
            t = tot.setdefault((r["cell"], r["repeat"]), [0, 0, 0, 0])
            t[0] += r["num_drafts"]
            for i, a in enumerate(r["accepted_per_pos"]):
                t[i + 1] += a
    return tot
