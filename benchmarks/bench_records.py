"""Benchmark: `show`, `compare`, `report` and `history` over a run of 10⁶ prompt records.

Writes a run in the real on-disk format through the store's RunWriter (manifest.json + records.jsonl, one
JSON line per prompt as the worker writes them, per-request histogram counts and the 120-character output
head included), then times the real CLI in fresh subprocesses, as CI would call it:

1. `show` on the bare run: parses the JSONL (the authoritative, validating reader) and writes the columnar
   copy (records.parquet) — the one-time cost a run pays when it ends;
2. `show`, `compare`, `report --html`, `history` again: they read the columnar copy.

Also times, in-process, the stages of one `compare` (load, collect, the verdicts). Writes a Markdown report
(default benchmarks/reports/bench_records.md) with the machine, versions and every measured wall time.

    python benchmarks/bench_records.py [--records 1000000] [--out /tmp/mtpbench-bench] [--report FILE]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import mtpbench.cli  # noqa: E402,F401 - first: the CLI's numpy settings (huge pages off) hold for the stages too
from mtpbench.schema import CellStatus, RunStatus  # noqa: E402
from mtpbench.store.records import RECORDS  # noqa: E402
from mtpbench.store.writer import RunWriter  # noqa: E402

K = 3
HISTORY_CACHE = "history-point.json"
CELLS = [
    ("v0.26.0rc1", "NONE", "stock"),
    ("v0.26.0rc1", "FULL_DECODE_ONLY", "stock"),
    ("v0.26.0rc1", "NONE", "fixed"),
    ("v0.26.0rc1", "FULL_DECODE_ONLY", "fixed"),
]
REPEATS = 2
RATES = (0.982, 0.963, 0.899)


def write_run(path: Path, n_records: int, seed: int = 0) -> None:
    per_cell = n_records // (len(CELLS) * REPEATS)
    cfg = {
        "name": "bench",
        "model": "gemma-4",
        "speculative": {"method": "mtp", "model": "gemma-4-assistant", "num_speculative_tokens": K, "extra": {}},
        "sampling": {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_tokens": 128, "ignore_eos": False},
        "modes": {"NONE": {"cudagraph_mode": "NONE"}, "FULL_DECODE_ONLY": {"cudagraph_mode": "FULL_DECODE_ONLY"}},
        "gate": {},
    }
    ids = [f"req-{i:07d}" for i in range(per_cell)]
    prompts = {"name": "serving", "sha256": hashlib.sha256(b"bench").hexdigest(), "ids": ids}
    run = RunWriter.create(path, config=cfg, config_path="bench.yaml", prompts=prompts)
    rng = random.Random(seed)
    for build, mode, variant in CELLS:
        for r in range(REPEATS):
            i = run.add_cell(
                build=build,
                mode=mode,
                variant=variant,
                repeat=r,
                hash_seed=r,
                status=CellStatus.OK,
                wall_s=1.0,
                engine_start_s=0.1,
            )
            run.append(cell_records(run, i, ids, rng))  # drawn as written: 10⁶ records never sit in memory
    run.finish(RunStatus.COMPLETE, finished=run.manifest["created"])


def cell_records(run: RunWriter, i: int, ids: list[str], rng: random.Random) -> Iterator[dict[str, Any]]:
    """One cell-repeat's records, as the worker writes them: cell_start, a prompt record per id, cell_end."""
    mode = run.cells[i]["mode"]
    yield run.record(
        i,
        "cell_start",
        requested={"cudagraph_mode": mode},
        effective={"cudagraph_mode": mode},
        patches=[],
        env={"versions": {"vllm": "0.32.0"}, "git_sha": {}},
    )
    for j, pid in enumerate(ids):
        drafts = rng.randint(30, 50)
        acc, prev = [], drafts
        for rate in RATES:  # accepted counts are a prefix: never more at i than at i-1
            prev = max(0, min(prev, round(drafts * rate + rng.uniform(-2, 2))))
            acc.append(prev)
        counts = {
            "num_drafts": drafts,
            "num_draft_tokens": drafts * K,
            "num_accepted_tokens": sum(acc),
            "accepted_per_pos": acc,
        }
        yield run.record(
            i,
            "prompt",
            prompt_id=pid,
            prompt_index=j,
            **counts,
            num_prompt_tokens=40,
            num_generated_tokens=128,
            finish_reason="length",
            output_sha256=hashlib.sha256(pid.encode()).hexdigest(),
            output_head=("def solve(xs):\n    return sorted(set(xs)) " * 3)[:120],
            wall_s=0.1234,
            source="counters",
            per_request=dict(counts),
        )
    yield run.record(i, "cell_end", wall_s=1.0, engine_start_s=0.1)


def baseline_file(path: Path) -> Path:
    b = path / "bench-baseline.yaml"
    b.write_text(
        "schema: 1\nname: bench\nprovenance: {source: benchmark, date: '2026-12-03'}\n"
        "fingerprint: {model: gemma-4, method: mtp, num_speculative_tokens: 3,\n"
        "  sampling: {temperature: 0.0, top_p: 1.0, top_k: -1, max_tokens: 128, ignore_eos: false}}\n"
        "entries:\n- {build: '*', mode: NONE, rates_pct: [98.2, 96.3, 89.9]}\n"
        "- {build: '*', mode: FULL_DECODE_ONLY, rates_pct: [98.2, 96.3, 89.9]}\n"
    )
    return b


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(
    cmd: list[str], times: int = 5, before: Callable[[], None] | None = None, extra_env: dict[str, str] | None = None
) -> tuple[float, float, float]:
    """(wall s, CPU s of the process, 1-minute load average when it ended) of a fresh CLI process: the run
    with the median wall time of `times` (`before` is called ahead of each, e.g. to drop a cache). On a
    shared box the wall time grows with the load; the CPU time is the work the command itself did."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MTPBENCH_WIDTH": "200", **(extra_env or {})}
    env.pop("NUMPY_MADVISE_HUGEPAGE", None)
    got = []
    for _ in range(times):
        if before is not None:
            before()
        t, c = time.perf_counter(), _children_cpu()
        p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall, cpu = time.perf_counter() - t, _children_cpu() - c
        if p.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
        got.append((wall, cpu, os.getloadavg()[0]))
    return sorted(got)[len(got) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, default=Path("/tmp/mtpbench-bench"))
    ap.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "reports" / "bench_records.md")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="Reuse a run already written under --out (its copy is deleted first, so the cold path is measured again).",
    )
    args = ap.parse_args()
    run = args.out / "runs" / "20261203T000000Z-bench"
    gen_s = None
    if not (args.reuse and (run / RECORDS).is_file()):
        shutil.rmtree(args.out, ignore_errors=True)
        t = time.perf_counter()
        write_run(run, args.records)
        gen_s = time.perf_counter() - t
    (run / "records.parquet").unlink(missing_ok=True)
    n_records = sum(1 for _ in (run / RECORDS).open("rb")) - len(CELLS) * REPEATS * 2
    jsonl_mb = (run / RECORDS).stat().st_size / 2**20
    base = baseline_file(args.out)
    mb = [sys.executable, "-m", "mtpbench"]
    rows: list[tuple[str, tuple[float, float, float]]] = []
    load_before = os.getloadavg()[0]
    (run / HISTORY_CACHE).unlink(missing_ok=True)
    rows.append(("show (bare run: parse JSONL, write records.parquet)", timed([*mb, "show", str(run)], times=1)))
    parquet_mb = (run / "records.parquet").stat().st_size / 2**20
    rows.append(("show", timed([*mb, "show", str(run)])))
    # The bench baseline is rates-only (no identity fields): compare must be told to accept that.
    compare = [*mb, "compare", str(run), "--baseline", str(base), "--accept-unchecked"]
    rows.append(("compare --baseline --accept-unchecked", timed(compare)))
    report = [*mb, "report", str(run), "--html", str(args.out / "report.html")]
    rows.append(("report --html", timed(report)))
    one = timed(report, extra_env={"MTPBENCH_PAINTER": "0"})
    rows.append(("report --html, all in one process (MTPBENCH_PAINTER=0)", one))
    painted = rows[-2][1]
    drop = functools.partial((run / HISTORY_CACHE).unlink, missing_ok=True)
    rows.append(
        (
            "history RUN RUN (cold: no per-run cache yet, reads the copy)",
            timed([*mb, "history", str(run), str(run)], before=drop),
        )
    )
    rows.append(("history RUN RUN (warm: the per-run cache)", timed([*mb, "history", str(run), str(run)])))
    rows.append(("history, the run folder given 30 times (warm)", timed([*mb, "history", *[str(run)] * 30])))
    # The same commands on a stored 40-prompt run of the tiny pair: the part of each time that is not per record.
    tiny = args.out / "tiny-stock-fault"
    shutil.rmtree(tiny, ignore_errors=True)
    shutil.copytree(ROOT / "tests" / "data" / "runs" / "tiny-stock-fault", tiny)
    subprocess.run([*mb, "show", str(tiny)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    floor = [
        ("show (a stored 40-prompt tiny run: the floor)", timed([*mb, "show", str(tiny)])),
        (
            "report --html (the same tiny run: the floor)",
            timed([*mb, "report", str(tiny), "--html", str(args.out / "tiny.html")]),
        ),
        ("history RUN RUN (the same tiny run, warm: the floor)", timed([*mb, "history", str(tiny), str(tiny)])),
        (
            "python -c 'import mtpbench.judge.compare, pyarrow' (import floor)",
            timed([sys.executable, "-c", "import mtpbench.cli, mtpbench.judge.compare, pyarrow.parquet"]),
        ),
    ]
    # In-process stages of one compare from the copy.
    from mtpbench.judge import compare as cmp
    from mtpbench.judge import evidence
    from mtpbench.store.baseline import load_baseline
    from mtpbench.store.results import load_run

    stages: list[tuple[str, tuple[float, float]]] = []
    t, c = time.perf_counter(), _self_cpu()
    r = load_run(run)
    stages.append(("load_run (manifest + records.parquet → frame)", (time.perf_counter() - t, _self_cpu() - c)))
    t, c = time.perf_counter(), _self_cpu()
    cells = evidence.collect(r)
    stages.append(("evidence.collect (frame → cells)", (time.perf_counter() - t, _self_cpu() - c)))
    t, c = time.perf_counter(), _self_cpu()
    cmp.judge(r, load_baseline(base), accept_unchecked=True)
    stages.append(("compare.judge (collect + verdicts)", (time.perf_counter() - t, _self_cpu() - c)))
    import pandas
    import pyarrow

    lines = [
        f"# Benchmark: commands over a run of {n_records} prompt records",
        "",
        f"Measured {datetime.now(timezone.utc).isoformat(timespec='seconds')} by `benchmarks/bench_records.py "
        f"--records {args.records}` on {platform.machine()} with {os.cpu_count()} CPU cores "
        f"({platform.platform()}), Python {platform.python_version()}, pandas {pandas.__version__}, "
        f"pyarrow {pyarrow.__version__}. 1-minute load average before the first command: {load_before:.2f}.",
        "",
        f"Run: {n_records} prompt records in {len(CELLS)} cells × {REPEATS} repeats "
        f"({sum(len(c.repeats) for c in cells)} repeats read back), records.jsonl {jsonl_mb:.0f} MB, "
        f"records.parquet {parquet_mb:.1f} MB"
        + (f"; writing the JSONL took {gen_s:.0f} s." if gen_s is not None else "."),
        "",
        "Each command ran in a fresh process, 5 times (the bare `show` once); the table gives the run with the "
        "median wall time. CPU s is user + system time of the command's process (its threads, and the "
        "painter process that draws `report`'s figures, included): the work it did. Wall s is the elapsed "
        "time, which grows with the load average shown (2 cores). Goal "
        "(issue 13): `compare`, `report` and `history` over 10⁶ records in ≤ 5 s.",
        "",
        "| command (fresh process) | CPU s | wall s | load avg | ≤ 5 s |",
        "|---|---|---|---|---|",
        *[
            f"| `{name}` | {cpu:.2f} | {wall:.2f} | {load:.1f} | {'yes' if wall <= 5 else '**no**'} |"
            for name, (wall, cpu, load) in rows
        ],
        "",
        f"`report --html` with the painter process: {painted[0] / one[0]:.2f}× the wall time of the same report "
        f"drawn in one process ({painted[0]:.2f} s vs {one[0]:.2f} s), {painted[1] / one[1]:.2f}× its CPU time "
        "(the painter imports numpy and matplotlib's plotting module itself, and the jobs are pickled).",
        "",
        "| the same on a 40-prompt run (what does not grow with the records) | CPU s | wall s | load avg |",
        "|---|---|---|---|",
        *[f"| `{name}` | {cpu:.2f} | {wall:.2f} | {load:.1f} |" for name, (wall, cpu, load) in floor],
        "",
        "| stage of one compare, in-process | CPU s | wall s |",
        "|---|---|---|",
        *[f"| {name} | {cpu:.2f} | {wall:.2f} |" for name, (wall, cpu) in stages],
        "",
    ]
    args.report.write_text("\n".join(lines), encoding="utf-8")
    sys.stdout.write("\n".join(lines))


if __name__ == "__main__":
    main()
