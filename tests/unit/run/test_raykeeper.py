"""The Ray keeper (mtpbench/run/ray/keeper.py), with a stand-in for `ray start`: one way out (EOF on its stdin,
or the command ending), its session swept, and the cluster's temp folder removed only when mtpbench is gone.
Called in-process (`keep`, `main`) and once as mtpbench runs it (`python -m`, leading a session of its own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from mtpbench.run.ray import keeper as raykeeper
from mtpbench.run.ray.cluster import session_members
from tests.support.polling import wait_for

# A stand-in for `ray start --block` that leaves a child behind, as the head leaves its GCS and raylet: it
# writes its own pid and its child's to MARKS and sleeps until killed.
FAKE_RAY = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(sys.argv[1], "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    time.sleep(600)
    """
)


def _marked(marks: Path, timeout: float = 30.0) -> list[int]:
    def pids() -> list[int]:
        text = marks.read_text() if marks.exists() else ""
        return [int(pid) for pid in text.split()] if len(text.split()) == 2 else []

    return wait_for(pids, timeout=timeout, what="the fake `ray start` never wrote its pids")


def _alive(pid: int) -> bool:
    return raykeeper.session_of(pid) is not None


def test_when_ray_start_ends_by_itself_the_keeper_leaves_with_its_code_and_keeps_the_folder(tmp_path: Path) -> None:
    temp_dir = tmp_path / "cluster"
    temp_dir.mkdir()
    read_end, write_end = os.pipe()  # mtpbench's pipe, still open: only `ray start` ends
    try:
        code = raykeeper.keep(temp_dir, [sys.executable, "-c", "raise SystemExit(3)"], stdin_fd=read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert code == 3
    assert temp_dir.is_dir()  # mtpbench is alive: its LocalCluster.stop removes the folder, with the log kept


def test_on_eof_the_keeper_kills_ray_start_and_removes_the_temp_folder(tmp_path: Path) -> None:
    temp_dir = tmp_path / "cluster"
    (temp_dir / "session").mkdir(parents=True)
    marks = tmp_path / "pids"
    read_end, write_end = os.pipe()
    got: list[int] = []
    keeper = threading.Thread(
        target=lambda: got.append(
            raykeeper.keep(temp_dir, [sys.executable, "-c", FAKE_RAY, str(marks)], stdin_fd=read_end)
        )
    )
    keeper.start()
    ray_pid, child_pid = _marked(marks)
    try:
        os.close(write_end)  # mtpbench closed its end
        keeper.join(timeout=30)
        assert got == [0]
        assert not temp_dir.exists()
        assert not _alive(ray_pid)  # not a session leader here: the keeper kills the command it started
    finally:
        os.close(read_end)
        if _alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)


def test_main_without_a_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert raykeeper.main(["/tmp/only-a-folder"]) == 2
    assert "usage: python -m mtpbench.run.ray.keeper TEMP_DIR RAY_START_COMMAND" in capsys.readouterr().err


def test_the_keeper_and_the_run_package_it_imports_are_standard_library_only() -> None:
    # `python -m mtpbench.run.ray.keeper` imports mtpbench.run first: the keeper lives as long as the cluster.
    probe = "import sys, mtpbench.run.ray.keeper; print(sorted({'pydantic', 'pandas', 'ray'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_as_mtpbench_runs_it_the_death_of_mtpbench_takes_the_session_and_the_folder(tmp_path: Path) -> None:
    # mtpbench stand-in: starts the keeper as LocalCluster does (python -m, a session of its own, stdin a
    # pipe from it), says the keeper's pid, and waits to be killed; SIGKILL closes the pipe (no goodbye).
    temp_dir = tmp_path / "cluster"
    temp_dir.mkdir()
    marks = tmp_path / "pids"
    parent = textwrap.dedent(
        f"""
        import subprocess, sys, time
        keeper = subprocess.Popen(
            [sys.executable, "-m", "mtpbench.run.ray.keeper", {str(temp_dir)!r}, sys.executable, "-c", {FAKE_RAY!r},
             {str(marks)!r}],
            stdin=subprocess.PIPE,
            start_new_session=True,
        )
        print(keeper.pid, flush=True)
        time.sleep(600)
        """
    )
    mtpbench = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert mtpbench.stdout is not None
    keeper_pid = int(mtpbench.stdout.readline())
    ray_pid, child_pid = _marked(marks)
    try:
        assert {keeper_pid, ray_pid, child_pid} <= set(session_members(keeper_pid))
        mtpbench.kill()
        mtpbench.wait()
        pids = [keeper_pid, ray_pid, child_pid]
        wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=15, what=lambda: session_members(keeper_pid))
        assert session_members(keeper_pid) == []
        wait_for(lambda: not temp_dir.exists(), timeout=10, what=f"{temp_dir} is still there")
    finally:
        for pid in session_members(keeper_pid):
            os.kill(pid, signal.SIGKILL)
