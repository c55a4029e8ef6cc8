"""A wheel that works: `pip install .` (not editable) gives a mtpbench whose shipped configs, prompt sets,
baselines and the tiny model pair are found from the installed package, outside the source tree.

The wheel is built from a copy of the source tree's files (what a fresh clone has) with the build backend
already in this environment (hatchling, from the test extra), and installed twice:
- `core`: into a fresh virtual environment with its declared dependencies only, resolved by pip from the
  package index it is configured with (no vllm, no extras, nothing of this environment): what
  `pip install .` gives a user, so a package the core imports but does not declare fails here (click did).
- `with_engine` (the engine test only): without dependencies, into a fresh environment that sees this
  one's site-packages through a .pth file (so vllm and torch are not installed again) but not its editable
  mtpbench: a .pth line adds a folder to the path without running that folder's own .pth files, so only
  the wheel's mtpbench can be imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# Builds the wheel and installs it into fresh venvs (half a minute and more).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("configs", "prompts", "baselines")


def _source_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [f for f in out.splitlines() if (REPO / f).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    for f in _source_files():
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, src / f)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(root / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=_clean_env(),
    )
    # Without the build backend here (a venv made before the test extra listed hatchling): `make test` adds it.
    assert built.returncode == 0, f"the wheel was not built:\n{built.stderr[-3000:]}"
    (whl,) = (root / "dist").glob("mtpbench-*.whl")
    return whl


def _venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300, env=_clean_env()
    )
    return venv


@pytest.fixture(scope="module")
def core(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment with the wheel and its declared dependencies, nothing else (pip from outside)."""
    venv = _venv(tmp_path_factory)
    res = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
        env=_clean_env(),
    )
    assert res.returncode == 0, f"pip could not install the wheel's dependencies:\n{res.stderr[-3000:]}"
    return venv


@pytest.fixture(scope="module")
def with_engine(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = _venv(tmp_path_factory)
    env = _clean_env()
    py = venv / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout.strip()
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    # Only now the dependencies: had pip seen this environment's (editable) mtpbench, it would have called
    # the wheel "already installed" and installed nothing.
    (purelib / "_mtpbench_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    assert (purelib / "mtpbench" / "__init__.py").is_file()
    return venv


def _clean_env() -> dict[str, str]:
    # No PYTHONPATH: a source tree on it (with a stray mtpbench.egg-info) would be "already installed".
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _run(venv: Path, *args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = _clean_env()
    env.update(MTPBENCH_WIDTH="200", COLUMNS="200", PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_wheel_contains_the_package_the_shipped_folders_and_the_tiny_pair(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for f in _source_files():
            if f.startswith("mtpbench/") and f.endswith(".py"):
                assert f in names, f"{f} is missing from the wheel"
            if f.startswith("mtpbench/fixtures/tiny_gemma4_mtp/"):
                assert f in names, f"{f} is missing from the wheel"
            top = f.split("/")[0]
            if top in SHIPPED and f.endswith(".yaml"):
                # Copies of the source of truth, byte for byte.
                packaged = f"mtpbench/_shipped/{f}"
                assert packaged in names, f"{f} is not shipped as {packaged}"
                assert z.read(packaged) == (REPO / f).read_bytes()
        assert not any(n.startswith(("tests/", "configs/", "prompts/", "baselines/")) for n in names)
        meta = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = z.read(meta).decode()
    assert "mtpbench = mtpbench.cli:main" in entry_points
    assert "mtpbench = mtpbench.plugin:register" in entry_points  # the vLLM general plugin


def test_core_only_install_has_no_engine_and_no_undeclared_package(core: Path, tmp_path: Path) -> None:
    # The environment really holds the core alone, and the command line imports nothing undeclared.
    probe = _run(
        core,
        str(core / "bin" / "python"),
        "-c",
        """
import importlib.util, json, sys
import mtpbench.cli
print(json.dumps({"absent": [m for m in ("vllm", "torch", "matplotlib", "ray", "pytest")
                             if importlib.util.find_spec(m) is None], "click": "click" in sys.modules}))
""",
        cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == {"absent": ["vllm", "torch", "matplotlib", "ray", "pytest"], "click": False}


def test_core_only_wheel_doctor_dry_run_and_show_outside_the_source_tree(core: Path, tmp_path: Path) -> None:
    py = str(core / "bin" / "python")
    probe = _run(
        core,
        py,
        "-c",
        """
import json, mtpbench, mtpbench.cli.selftest as s
from mtpbench.config import load_config, load_prompts
from mtpbench.store.baseline import load_baseline
from mtpbench import shipped
from mtpbench.run import runner
from mtpbench.run.envs.builds import preview_builds
cfg = load_config("tiny-gemma4-mtp")
for name in shipped.shipped_names("configs"):  # every shipped config loads and plans from the wheel
    c, _ = preview_builds(load_config(name))  # builds from pins planned as a dry run does: nothing installed
    runner.cell_jobs(c, load_prompts(c.prompts), runner.expand(c), "R", "records.jsonl")
print(json.dumps({"pkg": mtpbench.__file__, "model": cfg.model, "drafter": cfg.speculative.model,
                  "prompts": cfg.prompts, "baseline": cfg.baseline, "selftest": str(s.DEFAULT_CONFIG),
                  "sha": load_prompts(cfg.prompts).sha256(),
                  "k": load_baseline(cfg.baseline).fingerprint.num_speculative_tokens}))
""",
        cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    got = json.loads(probe.stdout)
    pkg = Path(got["pkg"]).parent
    assert pkg.is_relative_to(core), got  # the wheel's mtpbench, not the source tree's
    for key in ("model", "drafter", "prompts", "baseline", "selftest"):
        assert Path(got[key]).exists() and Path(got[key]).is_relative_to(pkg), (key, got[key])
    assert Path(got["model"], "model.safetensors").is_file()
    from mtpbench.config import load_config, load_prompts

    source = load_config(REPO / "configs" / "tiny-gemma4-mtp.yaml")  # the same prompt set as in the source tree
    assert got["sha"] == load_prompts(source.prompts).sha256() and got["k"] == 3

    mtpbench = str(core / "bin" / "mtpbench")
    # Without an engine in the environment, doctor says so (exit 3: this environment cannot run a cell)
    # in its table, not in a traceback.
    doctor = _run(core, mtpbench, "doctor", "--no-engine", cwd=tmp_path)
    assert doctor.returncode == 3 and doctor.stderr == "", doctor.stdout + doctor.stderr
    vllm_row = next(x for x in doctor.stdout.splitlines() if "vllm import" in x)
    assert "fail" in vllm_row and "No module named 'vllm'" in vllm_row, doctor.stdout
    # uv came with the core's dependencies, beside its python: builds are provisioned with it (issue 37.1).
    installer_row = next(x for x in doctor.stdout.splitlines() if "installer" in x)
    assert " ok " in installer_row and "uv " in installer_row, doctor.stdout

    for name in sorted(p.stem for p in (REPO / "configs").glob("*.yaml")):  # found by name, from the wheel
        dry = _run(core, mtpbench, "run", name, "--dry-run", cwd=tmp_path)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert f"{name}: " in dry.stdout and "dry run: nothing was started" in dry.stdout, dry.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # dry runs and doctor --no-engine write nothing

    # Judging needs no engine: a stored run, shown from the core alone (pandas, pyarrow, scipy).
    run = tmp_path.parent / f"{tmp_path.name}-run"
    shutil.copytree(REPO / "tests/data/runs/nightly/20261203T082003Z-tiny-gemma4-mtp", run)
    show = _run(core, mtpbench, "show", str(run), "--json", cwd=tmp_path)
    assert show.returncode == 0 and show.stderr == "", show.stdout + show.stderr
    assert json.loads(show.stdout)["exit_code"] == 0


@pytest.mark.engine
def test_installed_wheel_starts_an_engine_on_the_shipped_pair(with_engine: Path, tmp_path: Path) -> None:
    # `doctor` with its engine check: one eager engine on the packaged tiny pair, one prompt, 16 tokens,
    # started by a worker that imports mtpbench from the installed wheel.
    res = _run(with_engine, str(with_engine / "bin" / "mtpbench"), "doctor", cwd=tmp_path, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "engine ok" in res.stdout
    (run,) = (p for p in Path(tempfile_root(res.stdout)).iterdir() if p.is_dir())
    records = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    start = next(r for r in records if r["type"] == "cell_start")
    assert start["effective"]["speculative_method"] == "mtp"
    assert any(r["type"] == "prompt" and r["num_drafts"] > 0 for r in records)
    digest = hashlib.sha256((REPO / "mtpbench/fixtures/tiny_gemma4_mtp/target/config.json").read_bytes()).hexdigest()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["model"]["config_sha256"] == digest


def tempfile_root(doctor_stdout: str) -> str:
    """The folder `doctor` ran its engine check in, from its last line ("…, <folder>/<run>")."""
    line = next(x for x in doctor_stdout.splitlines() if "engine ok" in x)
    return str(Path(line.rsplit(", ", 1)[1].strip()).parent)
