"""Which devices a run may use and how a worker is bound to its share of them.

A build runs on one platform (CUDA, Ascend or CPU), and each platform has its own visibility variable:
`CUDA_VISIBLE_DEVICES`, `ASCEND_RT_VISIBLE_DEVICES`, and on vLLM-CPU `VLLM_CPU_OMP_THREADS_BIND` (a
core list plays the part of a device, so two workers never compute on the same cores). The variable is
chosen per build from what its interpreter has installed, or set by the build's `device_env`. The device
list comes from the command line, the config, or detection (the variable already set in the
environment, else the build's torch; for CPU builds, the cores split into one set per job). A CPU worker
gets its set's size as its OpenMP thread count, unpinned (`binding_env`). A cell that
runs tensor (or pipeline) parallel needs that many devices; the pool hands them out and takes them back
when the worker ends, whatever the outcome.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from mtpbench.buildprobes import devices as platform_probe
from mtpbench.errors import UserError
from mtpbench.run.pythonpath import worker_pythonpath

VISIBILITY_ENV = {
    "cuda": "CUDA_VISIBLE_DEVICES",
    "ascend": "ASCEND_RT_VISIBLE_DEVICES",
    "cpu": "VLLM_CPU_OMP_THREADS_BIND",
}

# The platform probe, run as `python -m mtpbench.buildprobes.devices` in the build's interpreter: from package
# metadata (milliseconds) which platform its vLLM targets, and with `count`, how many accelerators its
# torch sees (imports torch: seconds). It prints one line after its MARKER.
PLATFORM_PROBE = platform_probe.__name__
PLATFORM_MARKER = platform_probe.MARKER


def probe_platform(python: str | None, count: bool = False, timeout_s: float = 120) -> dict[str, Any]:
    exe = python or sys.executable
    try:
        proc = subprocess.run(
            [exe, "-m", PLATFORM_PROBE, *(["count"] if count else [])],
            env={**os.environ, "PYTHONPATH": worker_pythonpath(os.environ.get("PYTHONPATH", ""))},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"cannot run the build interpreter {exe}: {exc}") from None
    for line in proc.stdout.splitlines():
        if line.startswith(PLATFORM_MARKER):
            return dict(json.loads(line[len(PLATFORM_MARKER) :]))
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    raise UserError(f"build interpreter {exe} did not answer the platform probe: {tail[0]}")


def cpu_core_sets(jobs: int, cores: list[int] | None = None) -> list[str]:
    """The cores this process may use, split into `jobs` contiguous sets (vLLM-CPU's core-list syntax)."""
    avail = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if jobs > len(avail):
        raise UserError(f"--jobs {jobs}: this machine lets mtpbench use {len(avail)} CPU cores; a CPU worker needs one")
    per, extra = divmod(len(avail), jobs)
    sets, i = [], 0
    for j in range(jobs):
        n = per + (1 if j < extra else 0)
        sets.append(",".join(str(c) for c in avail[i : i + n]))
        i += n
    return sets


def core_count(core_set: str) -> int:
    """The cores of one vLLM-CPU core list: "0,1" → 2, "0-3" → 4, "0-1,6" → 3."""
    n = 0
    for part in core_set.split(","):
        low, _, high = part.strip().partition("-")
        n += int(high) - int(low) + 1 if high else 1
    return n


def parse_devices(text: str) -> list[str]:
    """`0,1,2` or `0 1 2` → ["0", "1", "2"]; CPU core sets are separated by `;` or `|` (`0-3;4-7`)."""
    seps = ";|" if any(s in text for s in ";|") else ", "
    for s in seps[1:]:
        text = text.replace(s, seps[0])
    out = [d.strip() for d in text.split(seps[0]) if d.strip()]
    if not out:
        raise UserError("--devices: no device given")
    if len(set(out)) != len(out):
        raise UserError(f"--devices: a device is listed twice ({text})")
    return out


def detect(platform: str, python: str | None, jobs: int) -> tuple[list[str], str]:
    """The device list of a platform and where it came from (for doctor and the run summary)."""
    var = VISIBILITY_ENV[platform]
    if platform == "cpu":
        return cpu_core_sets(jobs), f"{jobs} set(s) of the {len(os.sched_getaffinity(0))} usable CPU cores"
    inherited = os.environ.get(var)
    if inherited:
        return parse_devices(inherited), f"{var} in the environment"
    info = probe_platform(python, count=True)
    n = info.get("count")
    if not n:
        why = info.get("error") or "torch sees none"
        raise UserError(f"no {platform} device found ({why}); give the device list with --devices")
    return [str(i) for i in range(int(n))], f"{n} {platform} device(s) seen by torch"


def devices_needed(engine_args: dict[str, Any]) -> int:
    """Devices one engine occupies: tensor × pipeline parallel size (vLLM's EngineArgs names)."""
    tp = int(engine_args.get("tensor_parallel_size") or 1)
    pp = int(engine_args.get("pipeline_parallel_size") or 1)
    return max(tp, 1) * max(pp, 1)


@dataclass
class DevicePool:
    """Devices handed to workers: never one device to two workers at once, freed whatever the outcome."""

    devices: list[str]
    free: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.free = list(self.devices)

    def take(self, n: int) -> list[str] | None:
        if n > len(self.free):
            return None
        got, self.free = self.free[:n], self.free[n:]
        return got

    def give_back(self, got: list[str]) -> None:
        assert not set(got) & set(self.free), f"device(s) {got} returned twice"
        # Keep the pool's order so that the same cells land on the same devices from run to run.
        self.free = [d for d in self.devices if d in self.free or d in got]


def binding_env(var: str | None, devices: list[str]) -> dict[str, str]:
    if var is None or not devices:
        return {}
    if var == VISIBILITY_ENV["cpu"]:
        # vLLM-CPU: the worker's share of the cores as a thread count, not pinned to them ("nobind", as the
        # Ray executor does). Pinned to one core each, two workers on the shared 2-core box ran the same
        # cell-repeats 1.9x (the figure) and 1.22x longer than one at a time, or in 0.64x; unpinned,
        # in 0.32x the serial time, generation 4x faster than pinned (issue 37, docs/parallel.md): a pinned
        # OpenMP thread cannot move off a core that its engine's scheduler or another process is using.
        return {var: "nobind", "OMP_NUM_THREADS": str(core_count(devices[0]))}
    return {var: ",".join(devices)}
