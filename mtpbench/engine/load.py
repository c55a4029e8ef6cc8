"""The serving load of one cell-repeat: `num_requests` streamed completions at a fixed concurrency
(optionally paced at `request_rate` with exponential gaps, as `vllm bench serve` does), each answer's
per-request spec-decode counts and latencies, and the /metrics counters settled around it. Standard
library at module level; aiohttp (which vLLM brings) lazily."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import time
from collections.abc import Callable
from typing import Any

from mtpbench.engine.counts import counts_from_spec_metrics, spec_counters_from_metrics
from mtpbench.engine.server import Server

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


def sse_events(buffer: bytearray) -> list[str]:
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
                for data in sse_events(buf):
                    if data == "[DONE]":
                        continue
                    msg = json.loads(data)
                    if "error" in msg and not msg.get("choices"):
                        return {
                            "ok": False,
                            "error": f"stream error: {str(msg['error'])[:300]}",
                            "e2e_s": time.perf_counter() - t0,
                        }
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
    # The watcher looks every 0.25 s: a server killed between two looks fails every remaining request at
    # once (connection refused), so the load can end before the watcher sees the death. A server dead when
    # the load ends died during it: its failed requests are a failed run (exit 3), not a gate finding.
    died = died or not server_alive()
    return {"wall_s": time.perf_counter() - t_start, "server_died": died}


async def warmup(
    base_url: str,
    model: str,
    prompts: list[dict[str, str]],
    n: int,
    sampling: dict[str, Any],
    workload: dict[str, Any],
    k: int,
) -> list[dict[str, Any]]:
    """n requests (concurrency-limited) whose counts are excluded: the /metrics baseline is read after.
    Their results, in the order they ended."""
    if n <= 0:
        return []
    results: list[dict[str, Any]] = []
    await run_load(
        base_url,
        model,
        prompts,
        {**workload, "num_requests": n},
        sampling,
        k,
        lambda i, p, r: results.append(r),
        lambda: True,
    )
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
