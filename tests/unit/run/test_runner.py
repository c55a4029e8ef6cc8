"""The runner's process handling without an engine: signals, deadlines, the device pool, resume and
run-folder locking, with `tests/fake_worker.py` standing in for the worker (the engine is not what these
test; tests/engine/test_runner_engine.py repeats the essentials on the real engine)."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runfake import REPO, execute, fake_config, only_run, prompt_totals, wait_for

from mtpbench.config import load_config, load_prompts
from mtpbench.errors import UserError
from mtpbench.run import runner
from mtpbench.run.devices import DevicePool, binding_env, core_count, cpu_core_sets, devices_needed, parse_devices
from mtpbench.store.manifest import new_run_dir
from mtpbench.store.results import current_attempts, load_run


def cli_here(*args: Any) -> Any:
    """The CLI in this process (no interpreter start-up): for what needs no signal or kill."""
    from typer.testing import CliRunner

    from mtpbench.cli import app

    return CliRunner().invoke(app, [str(a) for a in args], env={"MTPBENCH_WIDTH": "200"})


def cli(*args: Any, **popen: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "MTPBENCH_WIDTH": "200", "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "mtpbench", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        **popen,
    )


def marked_processes(marks: Path) -> list[int]:
    """Live processes (workers, their children) that carry this test's marker in their environment."""
    needle = f"FAKE_MARK_DIR={marks}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                env = (d / "environ").read_bytes()
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in env.split(b"\0") and state != "Z":
                found.append(int(d.name))
    return found


# --- signals ---------------------------------------------------------------------------------------------


def _manifest(run: Path) -> dict[str, Any]:
    return json.loads((run / "manifest.json").read_text())


POINTS = {
    # right after the run folder exists: workers may or may not have been started yet
    "at-start": lambda marks, out: any(out.glob("*/manifest.json")),
    # while both workers are starting their (fake) engines
    "start-up": lambda marks, out: len(marked_processes(marks)) >= 4,
    # while a worker generates
    "generation": lambda marks, out: any(marks.glob("ready-*")),
}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("point", list(POINTS))
def test_signal_stops_every_worker_and_leaves_a_resumable_run(tmp_path: Path, sig: signal.Signals, point: str) -> None:
    # Grandchildren stand for vLLM's engine processes: they must go with their worker's process group.
    config = fake_config(
        tmp_path, {"b": {"startup": 1.5, "prompt": 3, "child": True}}, repeats=2, devices=["d0", "d1"], jobs=2
    )
    out, marks = tmp_path / "runs", tmp_path / "marks"
    proc = cli("run", config, "--out", out, "--no-compare")
    wait_for(lambda: POINTS[point](marks, out) or proc.poll() is not None)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    run = only_run(out)
    assert f"interrupted by {sig.name}" in err and f"mtpbench run --resume {run}" in err
    assert _manifest(run)["status"] == "interrupted"
    assert marked_processes(marks) == []
    assert all(c["status"] in ("interrupted", "pending") for c in _manifest(run)["cells"])


# --- deadlines and the device pool --------------------------------------------------------------------


def test_startup_and_generation_deadlines_are_separate(tmp_path: Path) -> None:
    config = fake_config(
        tmp_path,
        {
            "slow-start": {"startup": 2.0},  # slower start than the generation deadline: must not be killed
            "hang-start": {"hang": "startup", "child": True},
            "hang-gen": {"hang": "generation", "child": True},
        },
        startup_timeout_s=5,
        generation_timeout_s=1.0,
        jobs=3,
        devices=["a", "b", "c"],
    )
    t = time.monotonic()
    outcome = execute(config, tmp_path / "runs")
    by = {c["build"]: c for c in outcome.manifest["cells"]}
    assert by["slow-start"]["status"] == "ok"
    assert by["hang-start"]["status"] == "timeout" and "start-up exceeded 5 s" in by["hang-start"]["error"]
    assert by["hang-gen"]["status"] == "timeout" and "generation exceeded 1 s" in by["hang-gen"]["error"]
    assert 1.0 <= by["hang-gen"]["generation_s"] < 4.0
    assert time.monotonic() - t < 20
    assert marked_processes(tmp_path / "marks") == []
    assert outcome.exit_code == 3


def test_pool_never_shares_a_device_and_failed_workers_free_theirs(tmp_path: Path) -> None:
    config = fake_config(
        tmp_path,
        {
            "ok": {"startup": 0.3, "prompt": 0.1},
            "fails": {"fail": True, "startup": 0.2},
            "hangs": {"hang": "generation"},
        },
        repeats=3,
        # Long enough that the failing build's two prompts finish on a loaded box (at 0.5 s a load of 10 on two
        # cores turned its failures into timeouts), short enough that the hanging build's cells end quickly.
        generation_timeout_s=3.0,
        jobs=3,
        devices=["d0", "d1"],
        modes={
            "tp1": {"enforce_eager": True},
            "tp2": {"enforce_eager": True, "engine_args": {"tensor_parallel_size": 2}},
        },
    )
    outcome = execute(config, tmp_path / "runs")
    cells = outcome.manifest["cells"]
    assert len(cells) == 18 and all(c["status"] != "pending" for c in cells)  # every device came back
    assert {c["status"] for c in cells if c["build"] == "fails"} == {"failed"}
    assert {c["status"] for c in cells if c["build"] == "hangs"} == {"timeout"}
    marks = tmp_path / "marks"
    assert list(marks.glob("collision-*")) == [], "two workers held one device at once"
    assert all(len(c["devices"]) == (2 if c["mode"] == "tp2" else 1) for c in cells)
    # Each worker saw its own device(s) only, through the build's variable (device_env overrides CUDA's).
    given = {(c["cell"], c["repeat"]): ",".join(c["devices"]) for c in cells}
    for r in load_run(outcome.path).cell_starts():
        assert r["visible"]["FAKE_DEVICES"] == given[(r["cell"], r["repeat"])]
        assert r["visible"]["CUDA_VISIBLE_DEVICES"] is None
    used = {p.name: len(p.read_text().split()) for p in marks.glob("used-*")}
    assert used["used-d0"] > 3 and used["used-d1"] > 3


def test_a_cell_needing_more_devices_than_the_pool_is_refused_before_a_run_folder(tmp_path: Path) -> None:
    config = fake_config(
        tmp_path, {"b": {}}, devices=["0"], jobs=1, modes={"tp2": {"engine_args": {"tensor_parallel_size": 2}}}
    )
    with pytest.raises(UserError, match="needs 2 devices"):
        execute(config, tmp_path / "runs")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_records_from_concurrent_workers_never_interleave(tmp_path: Path) -> None:
    # 64 KiB lines from two workers at once: each line must arrive whole (engine/records.append_record).
    config = fake_config(
        tmp_path, {"b": {"prompt": 0.0, "pad": 65536}}, prompts=40, repeats=4, jobs=2, devices=["0", "1"]
    )
    outcome = execute(config, tmp_path / "runs")
    lines = (outcome.path / "records.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(x) for x in lines[:-1])
    assert sum(1 for r in load_run(outcome.path).records if r["type"] == "prompt") == 160


# --- resume and locking ---------------------------------------------------------------------------------


def test_resume_reruns_only_unfinished_repeats_and_supersedes_their_records(tmp_path: Path) -> None:
    gate = tmp_path / "fixed"
    config = fake_config(tmp_path, {"good": {}, "flaky": {"fail_unless": str(gate)}}, prompts=3, repeats=2)
    out = tmp_path / "runs"
    first = execute(config, out)
    assert first.exit_code == 3 and len(first.failed) == 2
    before = prompt_totals(first.path)
    raw_before = (first.path / "records.jsonl").read_text().count('"type":"prompt"')
    gate.touch()
    res = cli_here("run", "--resume", first.path, "--no-compare")
    assert res.exit_code == 0, res.output
    m = _manifest(first.path)
    assert m["status"] == "complete" and len(m["resumed"]) == 1 and m["resumed"][0]["cells"] == 2
    attempts = {(c["build"], c["repeat"]): c["attempt"] for c in m["cells"]}
    assert attempts == {("good", 0): 1, ("good", 1): 1, ("flaky", 0): 2, ("flaky", 1): 2}
    after = prompt_totals(first.path)
    # The failed attempt's prompts are still in the file but no longer count: no repeat counts twice.
    assert (first.path / "records.jsonl").read_text().count('"type":"prompt"') == raw_before + 6
    assert sum(1 for r in load_run(first.path).records if r["type"] == "prompt") == 12
    assert after == {**before, **{k: v for k, v in after.items() if "flaky" in k[0]}}
    assert after[("flaky/eager/stock", 0)] == after[("good/eager/stock", 0)]


def test_resume_after_sigkill_of_runner_and_worker_gives_the_uninterrupted_counts(tmp_path: Path) -> None:
    config = fake_config(tmp_path, {"b": {"startup": 0.2, "prompt": 0.4}}, prompts=4, repeats=2)
    clean = execute(config, tmp_path / "clean")
    out = tmp_path / "runs"
    proc = cli("run", config, "--out", out, "--no-compare")
    wait_for(
        lambda: any(out.glob("*/records.jsonl")) and '"type":"prompt"' in next(out.glob("*/records.jsonl")).read_text()
    )
    run = only_run(out)
    pid = next(c["pid"] for c in _manifest(run)["cells"] if c.get("pid"))
    os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.communicate()
    assert _manifest(run)["status"] == "running"  # what a killed runner leaves behind
    res = cli_here("run", "--resume", run, "--no-compare")
    assert res.exit_code == 0, res.output
    assert prompt_totals(run) == prompt_totals(clean.path)


def test_a_killed_runner_takes_its_workers_with_it(tmp_path: Path) -> None:
    # PR_SET_PDEATHSIG: SIGKILL of the runner alone (nothing can catch it) still ends the worker.
    config = fake_config(tmp_path, {"b": {"startup": 30}})
    out = tmp_path / "runs"
    proc = cli("run", config, "--out", out, "--no-compare")
    wait_for(lambda: marked_processes(tmp_path / "marks") != [])
    proc.kill()
    proc.communicate()
    wait_for(lambda: marked_processes(tmp_path / "marks") == [], timeout=10)


def test_resume_of_a_run_in_use_is_refused(tmp_path: Path) -> None:
    config = fake_config(tmp_path, {"b": {}})
    outcome = execute(config, tmp_path / "runs")
    fd = os.open(outcome.path / runner.LOCK, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        res = cli_here("run", "--resume", outcome.path)
    finally:
        os.close(fd)
    assert res.exit_code == 2 and "in use by another mtpbench" in res.output
    assert "Traceback" not in res.output


def test_resume_refuses_a_config_argument(tmp_path: Path) -> None:
    res = cli_here("run", "configs/tiny-gemma4-mtp.yaml", "--resume", tmp_path)
    assert res.exit_code == 2 and "--resume RUN takes the run's own config" in res.output


def _claim(out: str, q: Any) -> None:
    q.put(str(new_run_dir(Path(out), "same")))


def test_runs_started_at_once_never_share_a_folder(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(str(tmp_path), q)) for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    got = [q.get() for _ in procs]
    assert len(set(got)) == 8 and all(p.exitcode == 0 for p in procs)


def test_current_attempts_keep_only_the_manifests_attempt() -> None:
    cells = [{"cell": "a", "repeat": 0, "attempt": 2}, {"cell": "a", "repeat": 1}]
    recs = [
        {"type": "prompt", "cell": "a", "repeat": 0, "attempt": 1},
        {"type": "prompt", "cell": "a", "repeat": 0, "attempt": 2},
        {"type": "prompt", "cell": "a", "repeat": 1},  # before attempts existed: attempt 1
        {"type": "prompt", "cell": "a", "repeat": 1, "attempt": 2},  # an orphan of an attempt never recorded
    ]
    assert current_attempts(recs, cells) == [recs[1], recs[2]]


# --- devices ---------------------------------------------------------------------------------------------


def test_device_helpers() -> None:
    assert cpu_core_sets(2, [0, 1, 2, 3, 4]) == ["0,1,2", "3,4"]
    with pytest.raises(UserError):
        cpu_core_sets(3, [0, 1])
    assert parse_devices("0,1, 2") == ["0", "1", "2"] and parse_devices("0-3;4-7") == ["0-3", "4-7"]
    with pytest.raises(UserError):
        parse_devices("0,0")
    pool = DevicePool(["0", "1", "2"])
    a, b = pool.take(2), pool.take(1)
    assert a == ["0", "1"] and b == ["2"] and pool.take(1) is None
    pool.give_back(a)
    assert pool.take(2) == ["0", "1"]
    assert devices_needed({"tensor_parallel_size": 4, "pipeline_parallel_size": 2}) == 8
    assert binding_env("CUDA_VISIBLE_DEVICES", ["2", "3"]) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert core_count("0-1,6") == 3 and core_count("4") == 1


def test_a_cpu_worker_gets_its_share_of_the_cores_as_unpinned_threads() -> None:
    # Issue 37 item 17: pinned to one core each (VLLM_CPU_OMP_THREADS_BIND=0 and =1), two workers on the
    # 2-core box ran the same cell-repeats 1.9x longer than one at a time; unpinned, in 0.32x.
    assert binding_env("VLLM_CPU_OMP_THREADS_BIND", ["1"]) == {
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "1",
    }
    assert binding_env("VLLM_CPU_OMP_THREADS_BIND", ["0-3"])["OMP_NUM_THREADS"] == "4"


# --- cost ------------------------------------------------------------------------------------------------


def test_dry_run_estimates_from_earlier_runs_of_the_config(tmp_path: Path) -> None:
    config = fake_config(tmp_path, {"b": {"startup": 0.5}}, repeats=2)
    out = tmp_path / "runs"
    before = cli_here("run", config, "--out", out, "--dry-run", "--jobs", "2")
    # The fake worker needs no model: its 'fake-model' names nothing, so the preflight exits 2 (issue 30),
    # after the whole listing and the estimate.
    assert before.exit_code == 2 and "no earlier runs of fake" in before.output, before.output
    done = execute(config, out)
    per = sum(c["wall_s"] for c in done.manifest["cells"]) / 2
    after = cli_here("run", config, "--out", out, "--dry-run", "--jobs", "2")
    assert f"estimate: about {per:.0f} s wall with --executor local --jobs 2" in after.output
    serial = cli_here("run", config, "--out", out, "--dry-run")
    assert f"estimate: about {2 * per:.0f} s wall with --executor local --jobs 1" in serial.output


def test_doctor_shows_the_device_pool_it_would_use() -> None:
    from mtpbench.run.doctor import device_pool_text

    gpus = {"torch": {"count": 2, "device": "H100"}, "visible": {"CUDA_VISIBLE_DEVICES": None}}
    assert (
        device_pool_text(gpus) == "2 device(s) 0,1 (detected by torch); --jobs binds each worker through "
        "CUDA_VISIBLE_DEVICES"
    )
    npus = {"torch": {"count": 2, "npu": True}, "visible": {"ASCEND_RT_VISIBLE_DEVICES": "4,5"}}
    assert "4,5 (ASCEND_RT_VISIBLE_DEVICES in the environment)" in device_pool_text(npus)
    cpu = {"torch": {"count": 0}, "usable_cpus": [0, 1]}
    assert "2 usable CPU core(s) 0,1" in device_pool_text(cpu) and "VLLM_CPU_OMP_THREADS_BIND" in device_pool_text(cpu)


def test_a_broken_progress_view_neither_stops_the_run_nor_its_manifest(tmp_path: Path) -> None:
    # Regression: a CI runner that dies closes our stdout; the view's BrokenPipeError used to escape the
    # scheduling loop and leave the manifest saying `running`.
    config = fake_config(tmp_path, {"b": {}}, repeats=2)
    cfg = load_config(config)

    def broken(kind: str, payload: dict[str, Any]) -> None:
        if kind == "cell_end":
            raise BrokenPipeError(32, "Broken pipe")

    outcome = runner.execute(cfg, load_prompts(cfg.prompts), tmp_path / "runs", str(config), runner.expand(cfg), broken)
    m = _manifest(outcome.path)
    assert m["status"] == "complete" and [c["status"] for c in m["cells"]] == ["ok", "ok"]
    assert "BrokenPipeError" in m["sessions"][0]["ui_error"]


def test_a_ray_task_gives_its_worker_the_nodes_mtpbench_not_a_driver_path(tmp_path: Path, monkeypatch: Any) -> None:
    # Regression (issue 18): the node rewrote the driver's source root, which the worker's PYTHONPATH no
    # longer held once it became a link folder in the driver's cache, so a node without the driver's home
    # could not import mtpbench. The driver now sends the user's entries only; the node puts its own first.
    import mtpbench
    from mtpbench.run.executors import ray_task_body
    from mtpbench.run.pythonpath import package_path_dir, user_pythonpath, worker_pythonpath

    driver = worker_pythonpath("/opt/build/extra", "/opt/cann/python")
    assert driver.split(os.pathsep)[0] == str(package_path_dir())
    shipped = user_pythonpath(driver)
    assert shipped == os.pathsep.join(["/opt/build/extra", "/opt/cann/python"])
    monkeypatch.setenv("MTPBENCH_CACHE_DIR", str(tmp_path / "node-cache"))  # the node's cache, not the driver's
    job = tmp_path / "driver" / "JOB.json"
    res = ray_task_body(
        {
            "command": [
                "/driver/home/venv/bin/python",
                "-c",
                "import os, sys; print(os.environ['PYTHONPATH'], sys.argv)",
                str(job),
            ],
            "env": {"PYTHONPATH": shipped},
            "job": {"records_path": str(tmp_path / "driver" / "records.jsonl")},
            "job_path": str(job),
            "log_path": str(tmp_path / "driver" / "w.log"),
            "startup_timeout_s": 60.0,
            "generation_timeout_s": 60.0,
            "own_python": True,
        }
    )
    assert res["entry"]["status"] == "ok", res
    pythonpath, argv = res["log"].strip().split(" ", 1)
    first, *rest = pythonpath.split(os.pathsep)
    assert Path(first).parent == tmp_path / "node-cache" / "pythonpath"
    assert (Path(first) / "mtpbench").resolve() == Path(mtpbench.__file__).resolve().parent
    assert rest == ["/opt/build/extra", "/opt/cann/python"]
    # Node-local job file and records; the driver's folders were never made on the node.
    assert str(job) not in argv and not (tmp_path / "driver").exists()
