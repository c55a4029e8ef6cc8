"""`--executor ray` never hangs (issue 23): an address that does not answer fails within its deadline (exit 3),
a cell no node can place is refused before anything runs (exit 2), SIGTERM while the cluster mtpbench starts
itself (no address) comes up leaves no process of it, a node that dies mid-task fails its cell and --resume
runs it again. `tests/support/fake_worker.py` stands in for the worker: no engine runs here
(tests/engine/test_runner_engine.py runs the real one on the cluster mtpbench starts itself, with a stale
`ray_current_cluster` file about)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mtpbench.run.ray.auth import new_token
from mtpbench.run.ray.cluster import fit_problem, host_port, ray_request, session_members
from tests.support.fake_runs import execute, fake_config, only_run, prompt_totals
from tests.support.polling import wait_for
from tests.support.ray_nodes import client_without_token, kill_session, listening, off_loopback, safe_env, start_node

# Real Ray clusters (tens of seconds each): not part of the fast loop.
pytestmark = pytest.mark.slow

pytest.importorskip("ray", reason="the Ray executor tests need the ray extra")

REPO = Path(__file__).resolve().parents[3]
MARK = "MTPBENCH_RAY_TEST_MARK"


def cli(tmp: Path, *args: Any, **env: str) -> subprocess.Popen[str]:
    """The CLI in its own process, marked so that every process it starts (a Ray cluster too) can be found."""
    full = {**os.environ, "MTPBENCH_WIDTH": "200", "PYTHONPATH": str(REPO), MARK: str(tmp), **env}
    full.pop("RAY_ADDRESS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "mtpbench", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full,
        cwd=REPO,
    )


def marked(tmp: Path, needle: str = "") -> list[int]:
    """Live processes (not zombies) started with this test's mark, optionally with `needle` in their command."""
    mark = f"{MARK}={tmp}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                env = (d / "environ").read_bytes().split(b"\0")
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if mark in env and state != "Z" and needle in cmd:
                found.append(int(d.name))
    return found


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_fit_problem_names_the_missing_resource_and_the_largest_node() -> None:
    nodes = [
        {"Alive": True, "NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 8.0, "GPU": 2.0}},
        {"Alive": False, "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 8.0, "GPU": 8.0}},
    ]
    assert fit_problem(nodes, "GPU", [("a r0", 1), ("a r1", 2)], "h:1") is None
    # A dead node's GPUs do not count; each task runs on one node.
    msg = fit_problem(nodes, "GPU", [("a r0", 2), ("b r0", 4)], "h:1")
    assert msg is not None and msg.startswith("b r0: needs 4 GPU on one node") and "most any node" in msg
    msg = fit_problem(nodes, "NPU", [("a r0", 1)], "h:1")
    assert msg is not None and "no node of the Ray cluster at h:1 has NPU" in msg and "10.0.0.1: CPU 8, GPU 2" in msg
    assert fit_problem([], "CPU", [("a r0", 1)], "h:1") == "the Ray cluster at h:1 has no live node"
    assert ray_request("NPU", 2) == {"NPU": 2.0, "CPU": 1.0} and ray_request("CPU", 3) == {"CPU": 3.0}
    assert host_port("127.0.0.1:6379") == ("127.0.0.1", 6379) and host_port("[::1]:1") == ("::1", 1)
    assert host_port("auto") is None and host_port("ray://head:10001") is None


@pytest.mark.parametrize("listening", [False, True], ids=["nothing-listens", "listens-but-never-answers"])
def test_an_address_that_does_not_answer_fails_within_its_deadline(tmp_path: Path, listening: bool) -> None:
    # Regression (issue 23): ray.init retried an unreachable GCS for ever, printing only Ray's own lines.
    config = fake_config(tmp_path, {"current": {}}, ray_connect_timeout_s=2)
    srv = socket.socket()
    conns: list[socket.socket] = []
    if listening:  # accepts and says nothing: a port that is not a GCS, or a GCS that hangs
        srv.bind(("0.0.0.0", 0))
        srv.listen(16)
        threading.Thread(target=lambda: [conns.append(srv.accept()[0]) for _ in iter(int, 1)], daemon=True).start()
    port = srv.getsockname()[1] if listening else _closed_port()
    t0 = time.monotonic()
    proc = cli(
        tmp_path,
        "run",
        config,
        "--out",
        tmp_path / "runs",
        "--no-compare",
        "--executor",
        "ray",
        "--ray-resource",
        "CPU",
        "--address",
        f"127.0.0.1:{port}",
    )
    out, err = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    srv.close()
    assert proc.returncode == 3, out + err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "ray_connect_timeout_s" in lines[0] and f"127.0.0.1:{port}" in lines[0], err
    assert "within 2 s" in lines[0]
    assert took < 20, took  # the deadline plus the interpreter's and Ray's import
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_sigterm_while_the_own_cluster_starts_leaves_no_process_of_it(tmp_path: Path) -> None:
    config = fake_config(tmp_path, {"current": {}}, ray_start_timeout_s=300)
    proc = cli(
        tmp_path,
        "run",
        config,
        "--out",
        tmp_path / "runs",
        "--no-compare",
        "--executor",
        "ray",
        "--ray-resource",
        "CPU",
    )

    def starting() -> bool:
        assert proc.poll() is None, proc.communicate()
        return bool(marked(tmp_path, "ray.scripts.scripts start"))

    wait_for(starting, timeout=120, what="`ray start` never ran")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, out + err
    assert "interrupted by SIGTERM before any cell-repeat ran" in err
    assert marked(tmp_path) == [], [Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in marked(tmp_path)]


def _cmdline(pid: int) -> bytes:
    """A process's command line (empty once it is gone: a cluster's helpers come and go)."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


def _files_holding(folder: Path, secret: bytes) -> list[Path]:
    """The files under `folder` (a live cluster's: they come and go) whose bytes hold `secret`."""
    found = []
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink() and secret in path.read_bytes():
                found.append(path)
    return found


def test_the_cluster_mtpbench_starts_listens_on_loopback_only_and_lets_no_client_in_without_its_token(
    tmp_path: Path,
) -> None:
    # Issue 35: loopback kept the network out but not the machine's other users: any of them could join
    # 127.0.0.1:<port> and run code as the user who started mtpbench. Looked at while a cell-repeat runs: every
    # socket of mtpbench (the driver) and of its cluster listens on loopback, and a client without the token
    # is not let in.
    config = fake_config(tmp_path, {"current": {"hang": "generation"}}, repeats=1)
    proc = cli(
        tmp_path,
        "run",
        config,
        "--out",
        tmp_path / "runs",
        "--no-compare",
        "--executor",
        "ray",
        "--ray-resource",
        "CPU",
    )
    try:
        wait_for(lambda: any((tmp_path / "marks").glob("ready-*")), timeout=300)  # a worker runs on the cluster
        # The `ray start` process itself (its keeper's command line names it too).
        starts = [
            pid
            for pid in marked(tmp_path, "ray.scripts.scripts start")
            if pid not in marked(tmp_path, "mtpbench.run.ray.keeper")
        ]
        assert len(starts) == 1, starts
        ray_start = Path(f"/proc/{starts[0]}/cmdline").read_bytes().decode().split("\0")
        port = next(arg.split("=", 1)[1] for arg in ray_start if arg.startswith("--port="))
        pids = marked(tmp_path)
        assert any(address.endswith(f":{port}") for address in listening(pids)), listening(pids)  # the GCS
        assert off_loopback(pids) == [], listening(pids)
        assert client_without_token(f"127.0.0.1:{port}", tmp_path / "stranger") != "joined"
        # The token lives in the cluster's environment only: on no command line (readable by every user) and
        # in no file of the cluster's temp folder.
        environ = Path(f"/proc/{starts[0]}/environ").read_bytes().split(b"\0")
        token = next(item.split(b"=", 1)[1] for item in environ if item.startswith(b"RAY_AUTH_TOKEN="))
        assert len(token) == 64 and b"RAY_AUTH_MODE=token" in environ
        assert [pid for pid in marked(tmp_path) if token in _cmdline(pid)] == []
        temp = Path(next(arg.split("=", 1)[1] for arg in ray_start if arg.startswith("--temp-dir=")))
        assert _files_holding(temp, token) == []
        # doctor looks at the cluster a run would join, without joining it.
        doctor = cli(tmp_path, "doctor", "--no-engine", "--address", f"127.0.0.1:{port}")
        doctor_out, doctor_err = doctor.communicate(timeout=300)
        assert "token authentication on, GCS on loopback" in doctor_out, doctor_out + doctor_err
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, out + err
    assert marked(tmp_path) == []


def test_unplaceable_cells_are_refused_and_a_node_that_dies_mid_task_fails_only_its_cell_until_resume(
    tmp_path: Path,
) -> None:
    # A cluster the user started: a head that runs nothing and one node with one CPU (one cluster for all of
    # this: a start costs seconds). A GPU cell is refused before anything runs, and the cluster keeps running.
    # Two CPU cell-repeats: one runs on the node, the other waits for its CPU. The node dies: the running cell
    # fails (Ray's error), the waiting one can no longer be placed anywhere and fails after
    # ray_place_timeout_s; --resume on a new node runs both, with the counts of a local run.
    temp = Path(tempfile.mkdtemp(prefix="mtpb-test-ray-", dir="/tmp"))
    port = _closed_port()
    # The GCS declares a lost node dead after 3 missed health checks of 0.5 s (Ray's default: 5 of 3 s).
    token = new_token()
    health = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3"}
    env = safe_env(token, **{MARK: str(tmp_path)}, **health)
    common = ["--node-ip-address=127.0.0.1"]
    head = start_node(
        ["--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false", f"--temp-dir={temp}", *common],
        tmp_path / "head.log",
        env,
    )
    nodes = [head]
    try:
        node_args = [f"--address=127.0.0.1:{port}", "--num-cpus=1", *common]
        node = start_node(node_args, tmp_path / "node1.log", env)
        nodes.append(node)
        # Issue 35: the suite's own cluster listens on loopback only (the head's GCS, raylet, agents and
        # client server; the node's raylet and workers) and lets no client in without its token.
        pids = [*session_members(head.pid), *session_members(node.pid)]
        assert any(address.endswith(f":{port}") for address in listening(pids)), listening(pids)  # the GCS
        assert off_loopback(pids) == [], listening(pids)
        assert client_without_token(f"127.0.0.1:{port}", tmp_path / "stranger") != "joined"
        release = tmp_path / "release"
        config = fake_config(tmp_path, {"current": {"hang_unless": str(release)}}, repeats=2, ray_place_timeout_s=2)
        ray_opts = ["--no-compare", "--executor", "ray", "--address", f"127.0.0.1:{port}", "--ray-resource"]
        # No token here: one line, bad input, before anything runs (Ray's own join would retry until its deadline).
        proc = cli(
            tmp_path, "run", config, "--out", tmp_path / "runs", *ray_opts, "CPU", HOME=str(tmp_path / "stranger")
        )
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, out + err
        assert f"the Ray cluster at 127.0.0.1:{port} demands a token" in err and len(err.strip().splitlines()) == 1
        # The user's token, as a user hands it to mtpbench: RAY_AUTH_TOKEN (mtpbench turns token mode on).
        proc = cli(tmp_path, "run", config, "--out", tmp_path / "runs", *ray_opts, "GPU", RAY_AUTH_TOKEN=token)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, out + err
        assert (
            f"current/eager/stock r0: needs 1 GPU on one node, but no node of the Ray cluster at 127.0.0.1:{port} "
            "has GPU"
        ) in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
        assert head.poll() is None and node.poll() is None  # the user's cluster is left running

        ray_opts.append("CPU")
        proc = cli(tmp_path, "run", config, "--out", tmp_path / "runs", "--jobs", "2", *ray_opts, RAY_AUTH_TOKEN=token)
        wait_for(lambda: any((tmp_path / "marks").glob("ready-*")), timeout=300)  # a worker generates (hangs)
        kill_session(node)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 3, out + err
        run = only_run(tmp_path / "runs")
        cells = json.loads((run / "manifest.json").read_text())["cells"]
        assert [c["status"] for c in cells] == ["failed", "failed"], cells
        died, unplaced = sorted(c["error"] for c in cells)
        assert died.startswith("Ray: NodeDiedError") and "ray_place_timeout_s" in unplaced, (died, unplaced)
        assert marked(tmp_path, "fake_worker.py") == []  # the dead node's worker went with it

        release.touch()
        nodes.append(start_node(node_args, tmp_path / "node2.log", env))
        res = cli(tmp_path, "run", "--resume", run, *ray_opts, RAY_AUTH_TOKEN=token)
        out, err = res.communicate(timeout=300)
        assert res.returncode == 0, out + err
        local = execute(config, tmp_path / "local")
        assert prompt_totals(run) == prompt_totals(local.path) and len(prompt_totals(run)) == 2
    finally:
        for n in nodes:
            kill_session(n)
        shutil.rmtree(temp, ignore_errors=True)
