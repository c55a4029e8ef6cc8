"""What mtpbench sees of a Ray cluster without starting one (issue 35): the listening sockets read from
/proc/net/tcp{,6}, whether a GCS address is exposed beyond loopback, the one warning line a run and `doctor` give
about a cluster anyone may use, and the environment that makes a cluster demand its token. The clusters
themselves are looked at in tests/unit/run/test_ray_deadlines.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mtpbench.run.ray import auth as rayauth
from mtpbench.run.ray.auth import ClusterSafety, Listener

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def wide_listener() -> Iterator[int]:
    """A socket of this process listening on every interface (0.0.0.0): its port."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def test_proc_net_tcp_addresses_are_read_in_host_order() -> None:
    assert rayauth._proc_address("0100007F:1F90") == ("127.0.0.1", 8080)
    assert rayauth._proc_address("00000000:0050") == ("0.0.0.0", 80)
    assert rayauth._proc_address("00000000000000000000000001000000:0050") == ("::1", 80)
    assert rayauth._proc_address("0000000000000000FFFF00000100007F:0050") == ("::ffff:127.0.0.1", 80)


def test_loopback_is_told_apart_from_every_interface() -> None:
    assert Listener("127.0.0.1", 1, 0).on_loopback and Listener("::1", 1, 0).on_loopback
    assert Listener("::ffff:127.0.0.1", 1, 0).on_loopback  # how Ray's gRPC servers bind 127.0.0.1
    assert not Listener("0.0.0.0", 1, 0).on_loopback and not Listener("::", 1, 0).on_loopback
    assert not Listener("192.0.2.2", 1, 0).on_loopback
    assert str(Listener("::1", 5, 0)) == "[::1]:5" and str(Listener("0.0.0.0", 5, 0)) == "0.0.0.0:5"


def test_a_process_listening_on_every_interface_is_seen_and_its_port_called_exposed(wide_listener: int) -> None:
    mine = [listener for listener in rayauth.listeners([os.getpid()]) if listener.port == wide_listener]
    assert [str(listener) for listener in mine] == [f"0.0.0.0:{wide_listener}"]
    assert (
        rayauth.exposure("127.0.0.1", wide_listener) == f"its GCS listens on 0.0.0.0:{wide_listener}, beyond loopback"
    )
    assert rayauth.exposure("192.0.2.7", wide_listener) == "its GCS is reached at 192.0.2.7, beyond loopback"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        assert rayauth.exposure("127.0.0.1", sock.getsockname()[1]) is None


def test_the_warning_names_what_is_open_about_the_cluster_in_one_line() -> None:
    safe = ClusterSafety("127.0.0.1:6379", demands_token=True, exposed=None)
    assert safe.warning() is None
    open_here = ClusterSafety("127.0.0.1:6379", demands_token=False, exposed=None).warning()
    assert open_here is not None and "\n" not in open_here
    assert open_here.startswith("the Ray cluster at 127.0.0.1:6379 runs without token authentication")
    both = ClusterSafety("10.0.0.1:6379", False, "its GCS is reached at 10.0.0.1, beyond loopback").warning()
    assert both is not None and "without token authentication" in both and "beyond loopback" in both
    # A GCS that did not answer the look is not called open: the join itself says what is wrong.
    assert ClusterSafety("127.0.0.1:6379", demands_token=None, exposed=None).warning() is None


def test_the_started_cluster_gets_loopback_and_its_own_token_and_no_address_to_join() -> None:
    user = {"RAY_ADDRESS": "10.0.0.1:6379", "RAY_AUTH_TOKEN_PATH": "/home/u/.ray/other", "PATH": "/bin"}
    token = rayauth.new_token()
    env = rayauth.cluster_env(user, token)
    assert env == {
        "PATH": "/bin",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
    }
    assert len(token) == 64 and token != rayauth.new_token()


def test_doctor_warns_about_a_cluster_address_that_listens_beyond_loopback(wide_listener: int) -> None:
    # Not a GCS (it answers nothing), but its port is open to the network: that much doctor can tell.
    env = {**os.environ, "PYTHONPATH": str(REPO), "MTPBENCH_WIDTH": "300"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "mtpbench", "doctor", "--no-engine", "--address", f"127.0.0.1:{wide_listener}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=REPO,
    )
    rows = [line for line in proc.stdout.splitlines() if "ray cluster" in line]
    assert len(rows) == 1 and "warn" in rows[0], proc.stdout + proc.stderr
    assert f"listens on 0.0.0.0:{wide_listener}, beyond loopback" in rows[0]


def test_a_warning_about_the_cluster_is_one_line_of_the_run_and_kept_in_its_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The executor's warnings (a RayExecutor's joined cluster: ClusterSafety.warning) reach the run once, before
    # any cell-repeat starts, and stay in the session of the manifest. The executor here is the local one,
    # given a warning: what is under test is the runner's and the progress view's part.
    from rich.console import Console
    from rich.progress import Progress

    from mtpbench.cli.progress import ProgressView
    from mtpbench.config import load_config, load_prompts
    from mtpbench.run import runner
    from mtpbench.run.executors import LocalExecutor
    from tests.support.fake_runs import fake_config

    line = ClusterSafety("127.0.0.1:6379", demands_token=False, exposed=None).warning()
    assert line is not None
    monkeypatch.setattr(LocalExecutor, "warnings", (line,))
    config = fake_config(tmp_path, {"current": {}})
    cfg = load_config(config)
    console = Console(record=True, width=400, force_terminal=False)
    events: list[str] = []
    with Progress(console=console) as progress:
        view = ProgressView(progress, 1, 2)

        def on_event(kind: str, payload: dict[str, object]) -> None:
            events.append(kind)
            view(kind, payload)

        outcome = runner.execute(
            cfg, load_prompts(cfg.prompts), tmp_path / "runs", str(config), runner.expand(cfg), on_event
        )
    assert outcome.exit_code == 0
    assert events.count("warning") == 1 and events.index("warning") < events.index("cell_start")
    assert outcome.manifest["sessions"][0]["warnings"] == [line]
    printed = [text for text in console.export_text().splitlines() if text.startswith("warning: ")]
    assert printed == [f"warning: {line}"]
