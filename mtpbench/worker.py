"""One cell-repeat in a fresh process of the build's interpreter: start vLLM, run the prompts, record.

Runs as `<build python> -m mtpbench.worker JOB.json`. The build's interpreter may lack mtpbench's
dependencies, so this file imports only the standard library at module level and vllm lazily; the
runner puts mtpbench's source folder on PYTHONPATH. The job file says what to run and where to append
records; one JSON line per prompt is appended (and flushed) as each prompt finishes, so a crash loses at
most the prompt in flight. Progress goes to stdout as lines starting with EVENT_PREFIX; everything else
on stdout/stderr is the engine's log, which the runner keeps in a per-cell log file.

Counts are differences of the engine's cumulative spec-decode counters around each prompt (one prompt
at a time, so the difference is exactly that prompt's).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

EVENT_PREFIX = "@@mtpbench "
SCHEMA_VERSION = 1

M_DRAFTS = "vllm:spec_decode_num_drafts"
M_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
M_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
M_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(EVENT_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def append_record(path: str, record: dict[str, Any]) -> None:
    line = json.dumps(record, separators=(",", ":")) + "\n"
    # One write on an O_APPEND descriptor: a line is either all there or (on a crash mid-write) truncated
    # at the end of the file, which the loader reports.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def spec_counters(metrics: list[Any]) -> dict[str, Any]:
    """Sum the spec-decode counters over label sets (one per engine) from LLM.get_metrics()."""
    out: dict[str, Any] = {M_DRAFTS: 0, M_DRAFT_TOKENS: 0, M_ACCEPTED: 0, M_PER_POS: []}
    for m in metrics:
        name = getattr(m, "name", None)
        if name in (M_DRAFTS, M_DRAFT_TOKENS, M_ACCEPTED):
            out[name] += int(m.value)
        elif name == M_PER_POS:
            vals = [int(v) for v in m.values]
            acc = out[M_PER_POS]
            acc.extend([0] * (len(vals) - len(acc)))
            out[M_PER_POS] = [a + v for a, v in zip(acc, vals + [0] * (len(acc) - len(vals)), strict=True)]
    return out


def counter_delta(before: dict[str, Any], after: dict[str, Any], k: int) -> dict[str, Any]:
    pb = list(before[M_PER_POS]) + [0] * k
    pa = list(after[M_PER_POS]) + [0] * k
    return {
        "num_drafts": after[M_DRAFTS] - before[M_DRAFTS],
        "num_draft_tokens": after[M_DRAFT_TOKENS] - before[M_DRAFT_TOKENS],
        "num_accepted_tokens": after[M_ACCEPTED] - before[M_ACCEPTED],
        "accepted_per_pos": [pa[i] - pb[i] for i in range(k)],
    }


def per_request_supported() -> bool:
    try:
        import dataclasses

        from vllm.engine.arg_utils import EngineArgs

        return any(f.name == "per_request_spec_decode_metrics" for f in dataclasses.fields(EngineArgs))
    except Exception:
        return False


def per_request_counts(metrics: Any, k: int) -> dict[str, Any] | None:
    """Counts from vLLM's per-request histogram of accepted drafts per verify step (index j = accepted).
    Acceptance is a prefix, so position i was accepted in every step that accepted more than i."""
    hist = getattr(metrics, "histogram", None)
    if not hist:
        return None
    hist = [int(h) for h in hist]
    return {
        "num_drafts": sum(hist),
        "num_draft_tokens": int(getattr(metrics, "num_draft_tokens", 0)),
        "num_accepted_tokens": sum(j * c for j, c in enumerate(hist)),
        "accepted_per_pos": [sum(hist[i + 1 :]) for i in range(k)],
    }


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
        "versions": {m: _version(m) for m in ("vllm", "vllm_ascend", "torch", "torch_npu", "transformers")},
        "git_sha": {m: _git_sha(m) for m in ("vllm", "vllm_ascend")},
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
    return {
        "cudagraph_mode": getattr(cg, "name", None if cg is None else str(cg)),
        "compilation_mode": getattr(mode, "name", None if mode is None else str(mode)),
        "enforce_eager": bool(getattr(cfg.model_config, "enforce_eager", False)),
        "dtype": str(getattr(cfg.model_config, "dtype", "")),
        "speculative_method": getattr(spec, "method", None) if spec is not None else None,
        "num_speculative_tokens": getattr(spec, "num_speculative_tokens", None) if spec is not None else None,
        "device_type": str(getattr(cfg.device_config, "device_type", "")),
    }


def run_job(job: dict[str, Any]) -> int:
    base = {
        "schema": SCHEMA_VERSION,
        "run_id": job["run_id"],
        "cell": job["cell"],
        "build": job["build"],
        "mode": job["mode"],
        "variant": job["variant"],
        "repeat": job["repeat"],
        "hash_seed": job["hash_seed"],
    }
    records = job["records_path"]
    k = int(job["speculative_config"]["num_speculative_tokens"])
    if (job.get("workload") or {}).get("kind") == "serving":
        # Serving workload (mtpbench/serving.py): the build's own server owns the engine and the patches.
        from mtpbench.serving import run_serving_job

        return run_serving_job({**job, "schema": SCHEMA_VERSION}, emit, append_record, environment_fingerprint)

    from mtpbench.patches import apply_all

    outcomes = [o.to_dict() for o in apply_all(job.get("patches", []))]
    failed = [o for o in outcomes if o["status"] == "failed"]
    if failed:
        raise RuntimeError(f"patch {failed[0]['name']} failed: {failed[0]['detail']}")

    t0 = time.perf_counter()
    emit("engine_starting")
    from vllm import LLM, SamplingParams

    kwargs = dict(job["engine_args"])
    # vllm.LLM disables stat logging by default, and with it the spec-decode counters we read.
    kwargs["disable_log_stats"] = False
    if per_request_supported() and "per_request_spec_decode_metrics" not in kwargs:
        # A second, independent count (per request, from the scheduler) to cross-check the counters.
        kwargs["per_request_spec_decode_metrics"] = "summary"
    llm = LLM(model=job["model"], speculative_config=job["speculative_config"], **kwargs)
    engine_start_s = time.perf_counter() - t0
    eff = effective_config(llm)
    fingerprint = environment_fingerprint()
    append_record(
        records,
        {
            **base,
            "type": "cell_start",
            "requested": job["requested"],
            "effective": eff,
            "patches": outcomes,
            "engine_args": kwargs,
            "speculative_config": job["speculative_config"],
            "sampling": job["sampling"],
            "env": fingerprint,
            "engine_start_s": round(engine_start_s, 3),
        },
    )
    emit("engine_ready", engine_start_s=engine_start_s, effective=eff, patches=outcomes)

    sp = SamplingParams(**job["sampling"])
    before = spec_counters(llm.get_metrics())
    for i, prompt in enumerate(job["prompts"]):
        t = time.perf_counter()
        outputs = llm.generate([prompt["text"]], sp, use_tqdm=False)
        wall = time.perf_counter() - t
        after = spec_counters(llm.get_metrics())
        delta = counter_delta(before, after, k)
        before = after
        out = outputs[0].outputs[0]
        token_ids = list(out.token_ids)
        rec = {
            **base,
            "type": "prompt",
            "prompt_id": prompt["id"],
            "prompt_index": i,
            **delta,
            "num_prompt_tokens": len(outputs[0].prompt_token_ids or []),
            "num_generated_tokens": len(token_ids),
            "finish_reason": out.finish_reason,
            "output_sha256": hashlib.sha256(json.dumps(token_ids).encode()).hexdigest(),
            "output_head": out.text[:120],
            "wall_s": round(wall, 4),
            "source": "counters",
            "per_request": per_request_counts(getattr(out, "spec_decode_metrics", None), k),
        }
        append_record(records, rec)
        emit("prompt_done", index=i, prompt_id=prompt["id"], wall_s=wall, **delta)
    total = time.perf_counter() - t0
    from mtpbench.patches import observations

    applied = [o["name"] for o in outcomes if o["status"] == "applied"]
    end = {"type": "cell_end", "wall_s": round(total, 3), "engine_start_s": round(engine_start_s, 3)}
    append_record(records, {**base, **end, "patch_observations": observations(applied)})
    emit("cell_done", wall_s=total, engine_start_s=engine_start_s)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: python -m mtpbench.worker JOB.json\n")
        return 2
    job = json.loads(Path(argv[0]).read_text())
    try:
        return run_job(job)
    except BaseException as exc:
        emit("error", error=f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
