"""What a cell-repeat ran on, as its worker sees it from inside the build's interpreter: versions and git
shas of vllm / vllm_ascend / torch / torch_npu (and the versions of transformers and arctic_inference), the
device, the graph and compile modes the engine really resolved (platforms change them silently) and the engine
features it resolved (prefix caching, chunked prefill, batch size, async scheduling, context length), where vllm
was imported from, and the refusal to measure mtpbench's own vLLM in place of a build's. Standard library and
schema.py at module level; vllm lazily."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

from mtpbench.schema import FEATURES_READ_BACK


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    for dist in (module, module.replace("_", "-")):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    try:
        mod = __import__(module)
        return str(getattr(mod, "__version__", None))
    except Exception:
        return None


def _git_sha(module: str) -> str | None:
    try:
        mod = __import__(module)
        for attr in ("__commit__", "__git_sha__"):
            if getattr(mod, attr, None):
                return str(getattr(mod, attr))
        vmod = __import__(f"{module}._version", fromlist=["x"])
        for attr in ("__commit_id__", "commit_id", "__git_sha__"):
            if getattr(vmod, attr, None):
                return str(getattr(vmod, attr))
    except Exception:
        return None
    return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment_fingerprint() -> dict[str, Any]:
    fp: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
        # arctic_inference: the suffix tree vLLM's suffix method drafts with (reference/suffix.py mirrors 0.3.0's).
        "versions": {
            m: _version(m) for m in ("vllm", "vllm_ascend", "torch", "torch_npu", "transformers", "arctic_inference")
        },
        "git_sha": {m: _git_sha(m) for m in ("vllm", "vllm_ascend")},
        # Switches that decide how a compiled start is served (engine/worker.py cpu_compile_cache).
        "compile_env": {
            k: os.environ.get(k)
            for k in (
                "VLLM_USE_AOT_COMPILE",
                "VLLM_USE_MEGA_AOT_ARTIFACT",
                "VLLM_DISABLE_COMPILE_CACHE",
                "TORCHINDUCTOR_CACHE_DIR",
            )
        },
    }
    device = None
    try:
        from vllm.platforms import current_platform

        fp["vllm_platform"] = str(getattr(current_platform, "device_name", None) or current_platform)
        try:
            device = current_platform.get_device_name(0)
        except Exception:
            device = None
    except Exception:
        fp["vllm_platform"] = None
    # The CPU platform names its device "cpu": the processor model says more.
    fp["device"] = device if device and device.lower() != "cpu" else _cpu_name()
    return fp


def effective_config(llm: Any) -> dict[str, Any]:
    """What the engine actually runs with: platforms silently change requested graph/compile modes."""
    cfg = llm.llm_engine.vllm_config
    cc = cfg.compilation_config
    mode = getattr(cc, "mode", None)
    if mode is None:
        mode = getattr(cc, "level", None)
    cg = getattr(cc, "cudagraph_mode", None)
    spec = cfg.speculative_config
    sched = getattr(cfg, "scheduler_config", None)
    cache = getattr(cfg, "cache_config", None)
    # Engine features as the engine resolved them (vLLM-CPU turns async scheduling off whatever was asked):
    # None where this build's config has no such field, which the judge reads as "not read back".
    where = {
        "enable_prefix_caching": cache,
        "enable_chunked_prefill": sched,
        "max_num_batched_tokens": sched,
        "max_num_seqs": sched,
        "async_scheduling": sched,
        "max_model_len": cfg.model_config,
    }
    features = {name: getattr(where.get(name), name, None) for name in FEATURES_READ_BACK}
    return {
        "cudagraph_mode": getattr(cg, "name", None if cg is None else str(cg)),
        "compilation_mode": getattr(mode, "name", None if mode is None else str(mode)),
        "enforce_eager": bool(getattr(cfg.model_config, "enforce_eager", False)),
        "dtype": str(getattr(cfg.model_config, "dtype", "")),
        "speculative_method": getattr(spec, "method", None) if spec is not None else None,
        "num_speculative_tokens": getattr(spec, "num_speculative_tokens", None) if spec is not None else None,
        "device_type": str(getattr(cfg.device_config, "device_type", "")),
        **features,
    }


def import_origins() -> dict[str, str | None]:
    """Where vllm and vllm_ascend are imported from in this interpreter (module __file__; None if absent)."""
    import importlib.util

    out: dict[str, str | None] = {}
    for name in ("vllm", "vllm_ascend"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        out[name] = None if spec is None or spec.origin is None else str(Path(spec.origin).resolve())
    return out


def check_own_vllm(origins: dict[str, str | None], foreign_prefix: str | None) -> None:
    """Fail when a build with its own interpreter would import vLLM from mtpbench's environment.

    `foreign_prefix` is the runner's sys.prefix, set by the runner only for a build whose interpreter is
    not the runner's; an interpreter living in that same prefix is the runner's environment and allowed.
    """
    if not foreign_prefix:
        return
    prefix = Path(foreign_prefix).resolve()
    if Path(sys.prefix).resolve() == prefix:
        return
    for name, origin in origins.items():
        if origin is not None and Path(origin).is_relative_to(prefix):
            raise RuntimeError(
                f"{name} imported from mtpbench's own environment ({origin}), not from this build's "
                f"interpreter ({sys.executable}, prefix {sys.prefix}): this build would measure the wrong vLLM"
            )
