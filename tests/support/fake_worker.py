"""A stand-in for `mtpbench/engine/worker.py::run_job` with no engine, for tests of the runner's process handling
(signals, deadlines, device binding, resume bookkeeping), where the engine is not what is tested.

A build's `python:` points at a generated script that runs this file as `<script> -m mtpbench.engine.worker JOB`.
It speaks the real worker's protocol (EVENT_PREFIX events on stdout, records appended with
`mtpbench.engine.records.append_record`, `die_with_parent` first) and takes its behaviour from FAKE (JSON):
startup / prompt seconds, a hang in either phase (or in generation until a file exists), a failure exit, a
grandchild that must die with it.
Counts are a fixed function of the prompt index, so a resumed run must give the same totals; like a real
engine under greedy decoding, every process agrees (the gate's exact instability check requires it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from mtpbench.engine.records import append_record, emit
from mtpbench.engine.worker import die_with_parent
from mtpbench.schema import SCHEMA_VERSION


def main() -> int:
    die_with_parent()
    job = json.loads(open(sys.argv[-1]).read())
    fake = json.loads(os.environ.get("FAKE", "{}"))
    base = {k: job[k] for k in ("run_id", "cell", "build", "mode", "variant", "repeat", "hash_seed")}
    base.update(schema=SCHEMA_VERSION, attempt=int(job.get("attempt", 1)))
    marker = os.environ.get("FAKE_MARK_DIR")
    if fake.get("child"):
        # A grandchild in the worker's process group, as vLLM's engine or TP workers would be.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    held = []
    if marker:
        # One lock file per device this worker was given: a second worker on the same device at the same
        # time cannot take it and leaves a `collision` file for the test to find.
        import fcntl

        for dev in filter(None, os.environ.get(fake.get("device_env", "FAKE_DEVICES"), "").split(",")):
            fd = os.open(os.path.join(marker, f"dev-{dev}"), os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                open(os.path.join(marker, f"collision-{dev}-{os.getpid()}"), "w").close()
            held.append(fd)
            with open(os.path.join(marker, f"used-{dev}"), "a") as f:
                f.write(f"{os.getpid()}\n")
    if fake.get("fail_unless") and not os.path.exists(fake["fail_unless"]):
        fake["fail"] = True
    if fake.get("hang_unless") and not os.path.exists(fake["hang_unless"]):
        fake["hang"] = "generation"
    t0 = time.time()
    emit("engine_starting")
    time.sleep(float(fake.get("startup", 0.05)))
    if fake.get("hang") == "startup":
        time.sleep(10**6)
    seen = {
        v: os.environ.get(v)
        for v in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "VLLM_CPU_OMP_THREADS_BIND", "FAKE_DEVICES")
    }
    eff = {"cudagraph_mode": "NONE", "enforce_eager": True}
    append_record(
        job["records_path"],
        {**base, "type": "cell_start", "requested": job["requested"], "effective": eff, "patches": [], "visible": seen},
    )
    emit("engine_ready", engine_start_s=time.time() - t0, effective=eff, patches=[])
    if marker:
        open(os.path.join(marker, f"ready-{os.getpid()}"), "w").close()
    k = int(job["speculative_config"]["num_speculative_tokens"])
    for i, p in enumerate(job["prompts"]):
        time.sleep(float(fake.get("prompt", 0.02)))
        if fake.get("hang") == "generation":
            time.sleep(10**6)
        drafts = 10 + i
        per_pos = [max(drafts - 2 * j - 1, 0) for j in range(k)]
        pad = "x" * int(fake.get("pad", 0))
        append_record(
            job["records_path"],
            {
                **base,
                "type": "prompt",
                "prompt_id": p["id"],
                "prompt_index": i,
                "num_drafts": drafts,
                "num_draft_tokens": drafts * k,
                "num_accepted_tokens": sum(per_pos),
                "accepted_per_pos": per_pos,
                "num_generated_tokens": 16,
                "output_sha256": f"{p['id']}-out",
                "wall_s": 0.01,
                "pad": pad,
            },
        )
        emit("prompt_done", index=i, prompt_id=p["id"], wall_s=0.01)
    if fake.get("fail"):
        emit("error", error="RuntimeError: fake failure")
        return 3
    append_record(
        job["records_path"],
        {**base, "type": "cell_end", "wall_s": time.time() - t0, "t0": t0, "t1": time.time(), "visible": seen},
    )
    emit("cell_done", wall_s=time.time() - t0, engine_start_s=0.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
