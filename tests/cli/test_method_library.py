"""A method that imports a library beside vLLM (suffix decoding: arctic-inference) in a build whose interpreter
lacks it: one line and exit 2 from `run` and from `run --dry-run`, before any engine starts. Before, the cell's
engine failed at start-up with vLLM's "Arctic Inference is required for suffix decoding" (exit 3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mtpbench.cli import app

REPO = Path(__file__).resolve().parents[2]


def suffix_config(tmp_path: Path, python: str | None) -> Path:
    text = (REPO / "configs" / "tiny-gemma4-suffix.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text.replace("../", f"{REPO}/"))
    if python is not None:
        data["builds"] = {"bare": {"python": python}}
    path = tmp_path / "suffix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An interpreter with the standard library and a stand-in `vllm` package only: an engine's environment
    without arctic_inference (one without vLLM at all is the doctor's business, and is not refused here)."""
    venv = tmp_path_factory.mktemp("bare") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    (Path(purelib) / "vllm").mkdir(parents=True)
    (Path(purelib) / "vllm" / "__init__.py").write_text("")
    return python


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_a_build_without_arctic_inference_is_one_line_and_exit_2(tmp_path: Path, bare_python: str, dry: bool) -> None:
    config = suffix_config(tmp_path, bare_python)
    runs = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", str(config), "--out", str(runs), *(["--dry-run"] if dry else [])])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert lines == [
        f"mtpbench: error: {config}: method suffix needs arctic_inference, which build bare's interpreter "
        f"({bare_python}) lacks: install arctic-inference (mtpbench's suffix extra: pip install "
        "'mtpbench[suffix]'), or add it to the build's requirements"
    ], res.stderr
    assert not runs.exists() or not any(runs.iterdir())  # no run folder: no engine started


def test_the_install_has_what_the_shipped_suffix_config_needs(tmp_path: Path) -> None:
    # make run / make test install the suffix extra: the shipped config passes the same check.
    res = CliRunner().invoke(app, ["run", str(suffix_config(tmp_path, None)), "--dry-run", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output


def test_reference_replay_of_a_batched_shared_suffix_cache_is_refused_before_any_engine(tmp_path: Path) -> None:
    config = suffix_config(tmp_path, None)
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["speculative"]["extra"]["suffix_decoding_max_cached_requests"] = 10000
    data["reference_replay"] = True
    config.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    runs = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", str(config), "--out", str(runs), "--no-compare"])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "suffix decoding's cross-request cache is on and the prompts are batched" in lines[0]
    assert not runs.exists()


def test_an_interpreter_without_vllm_is_left_to_the_doctor(tmp_path: Path) -> None:
    # A core-only install plans and dry-runs every shipped config (tests/cli/test_wheel.py): no engine runs
    # there at all, which `mtpbench doctor` says; the method's library is not what is missing.
    venv = tmp_path / "plain"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    config = suffix_config(tmp_path, str(venv / "bin" / "python"))
    res = CliRunner().invoke(app, ["run", str(config), "--dry-run", "--out", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
