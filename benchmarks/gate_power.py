"""The gate's decision rule under prompt-level, bursty noise (issue 19 item 4): false alarms and power per run.

A Monte-Carlo through the real judging path. Each simulated run is written in mtpbench's on-disk format
(manifest.json + records.jsonl, one record per prompt, two cells of one build: `current/eager/stock` and
`current/graph/stock`, a graph mode whose reference is eager, so graph divergence is checked too) and read
back with `load_run`; its baseline is another, independent simulated run saved with the real `baseline save`
path (`baseline_of_run`: per-prompt counts, so the comparison is prompt-paired); the run is judged by
`mtpbench.judge.compare.judge` with the gate its config resolves to (the defaults of `GateSpec`), and the
outcome is `comparison.exit_code`. Nothing of the rule is reimplemented here: the script measures whatever
rule the checkout it sits in implements, and the report names the commit and the gate's fields.

Noise model (what a "truth" is and how a run is drawn from it):
- a truth is, per prompt, a token budget and unconditional per-position acceptance rates r_i (position i
  accepted only if i−1 was). Truths: the shipped baseline `baselines/tiny-gemma4-mtp-cpu.yaml` (40 prompts,
  its eager entry's per-prompt counts, 1,347 drafts), and a Gemma4-like set (prompts with 32-231 drafts,
  per-prompt rates spread around pooled 98/96/90 %, generated from a fixed seed). Other prompt counts take
  an evenly spaced subset (5 prompts) or more prompts from the same population (80, 160: the tiny set's
  prompts repeated under new ids, the Gemma4-like generator drawn further).
- within a prompt, drafts are bursty: a hidden easy/hard regime follows a two-state Markov chain over the
  prompt's drafts (hard share π, mean hard run L drafts); a share κ of the prompt's rejections falls in the
  hard regime (κ = π: no regime, independent drafts). Per regime, each position is accepted with its
  conditional rate, so the prefix property holds and the prompt's mean rates are its truth's.
- a prompt runs until it has generated its token budget (1 + accepted tokens per draft), so a prompt that
  accepts less makes more drafts, as under vLLM's max_tokens.
- harmless change: every prompt's trajectory re-drawn from the same truth; `harmless+shift`: in addition
  each prompt's rejection rate is scaled by exp(ε), ε ~ N(0, σ²) per prompt and run, rescaled so that the
  pooled rates do not move (a change that helps some prompts and hurts others).
- a drop of d points at position j: every prompt's conditional rate at j is scaled so the pooled
  unconditional rate at j falls by d points (later positions fall with it, as a drafter that got worse at
  j would make them); in the graph cell only (`1 cell`), or in both cells (`2 cells`).

One command: `python benchmarks/gate_power.py` (7-15 minutes on two shared cores) writes
benchmarks/reports/gate_power.md and .json; `--quick` (under a minute) is what tests/project/test_gate_power.py runs.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mtpbench.judge import compare as judging  # noqa: E402
from mtpbench.judge.noise import (  # noqa: E402
    BURSTS,
    SHIFT_SIGMA,
    Truth,
    al_scale,
    drop_scale,
    gemma_truth,
    resize,
    simulate,
)
from mtpbench.judge.save import baseline_of_run  # noqa: E402
from mtpbench.judge.stats import wilson  # noqa: E402
from mtpbench.schema import CellStatus, RunStatus  # noqa: E402
from mtpbench.specs import GateSpec  # noqa: E402
from mtpbench.store.baseline import load_baseline  # noqa: E402
from mtpbench.store.results import load_run  # noqa: E402
from mtpbench.store.writer import RunWriter  # noqa: E402

K = 3
# The shipped default's baseline (configs/tiny-gemma4-mtp.yaml names it); --tiny-baseline takes another.
TINY_BASELINE = REPO / "baselines" / "tiny-gemma4-mtp-humaneval-cpu.yaml"
REPORT_MD = REPO / "benchmarks" / "reports" / "gate_power.md"
REPORT_JSON = REPO / "benchmarks" / "reports" / "gate_power.json"
CELLS = ("current/eager/stock", "current/graph/stock")
GRAPH_CELL = CELLS[1]
# Goals the rule is built to meet (issue 19): per run, over all its checks.
GOAL_FALSE_ALARM = 0.01
GOAL_POWER = 0.90


# --- truths -------------------------------------------------------------------------------------------


def tiny_truth() -> Truth:
    """The shipped baseline's eager entry, prompt by prompt."""
    entry = next(e for e in load_baseline(TINY_BASELINE).entries if e.mode == "eager")
    global TINY_PROMPTS
    TINY_PROMPTS = len(entry.prompts or {})
    assert entry.prompts, f"{TINY_BASELINE}: the eager entry has no per-prompt counts"
    ids = tuple(entry.prompts)
    drafts = np.array([entry.prompts[p].num_drafts for p in ids], dtype=float)
    acc = np.array([entry.prompts[p].accepted_per_pos for p in ids], dtype=float)
    return Truth("tiny", ids, acc / drafts[:, None], drafts + acc.sum(axis=1))


def truth_for(name: str, n: int) -> Truth:
    return resize(tiny_truth(), n) if name == "tiny" else gemma_truth(n)


# --- the noise model --------------------------------------------------------------------------------


TINY_PROMPTS = 40  # prompts of the tiny baseline (set when it is read)
AL_DELTA = 5.0  # the gate's δ on acceptance length, % (GateSpec.tolerance_al_pct)
AL_DROPS = (3.0, 5.0, 8.0)


# --- runs on disk, judged by judging.judge() ---------------------------------------------------------


def write_run(path: Path, t: Truth, cells: dict[str, tuple[np.ndarray, np.ndarray]], baseline: str) -> Path:
    """One repeat per cell, per-prompt records in the real format; the same text in every cell (greedy)."""
    config = {
        "name": "gate-power",
        "model": "target",
        "speculative": {"method": "mtp", "model": "drafter", "num_speculative_tokens": K, "extra": {}},
        "sampling": {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_tokens": 128, "ignore_eos": False},
        "modes": {"eager": {"enforce_eager": True}, "graph": {"enforce_eager": False, "cudagraph_mode": "FULL"}},
        "gate": {},
        "baseline": baseline,
        "baseline_entry": {},
    }
    prompts = {"name": t.name, "sha256": "ab" * 32, "ids": list(t.ids)}
    run = RunWriter.create(path, config=config, config_path="gate-power.yaml", prompts=prompts)
    run.manifest["model"] = {"name": "target", "config_sha256": "cd" * 32, "weights_sha256": "c0" * 32}
    run.manifest["drafter"] = {"name": "drafter", "config_sha256": "ef" * 32, "weights_sha256": "e0" * 32}
    records: list[dict[str, Any]] = []
    for cell, (drafts, acc) in cells.items():
        build, mode, variant = cell.split("/")
        i = run.add_cell(build=build, mode=mode, variant=variant, repeat=0, hash_seed=0, status=CellStatus.OK)
        req = config["modes"][mode]
        eff = {"cudagraph_mode": req.get("cudagraph_mode") or "NONE"}
        records.append(run.record(i, "cell_start", requested=req, effective=eff, patches=[]))
        for j, pid in enumerate(t.ids):
            a = [int(x) for x in acc[j]]
            records.append(
                run.record(
                    i,
                    "prompt",
                    prompt_id=pid,
                    prompt_index=j,
                    num_drafts=int(drafts[j]),
                    num_draft_tokens=int(drafts[j]) * K,
                    num_accepted_tokens=sum(a),
                    accepted_per_pos=a,
                    num_generated_tokens=int(drafts[j]) + sum(a),
                    output_sha256=f"text-{pid}",
                    wall_s=0.1,
                )
            )
    run.append(records)
    # The status the runner gives a run whose every cell-repeat ended ok (this writer once said "finished").
    run.finish(RunStatus.COMPLETE)
    return run.path


@dataclass
class Outcome:
    exit_code: int
    kinds: list[str]
    underpowered_finding: bool  # an `underpowered` finding (warning, or failure under fail_on_underpowered)
    underpowered_check: bool  # some check could not certify δ (PositionCheck.underpowered)
    deltas: list[float] = field(default_factory=list)  # eager cell's Δ per position, points (spread figures)
    mdes: list[float] = field(default_factory=list)  # eager cell's smallest detectable drop per position, points
    al: tuple[float, float] | None = None  # eager cell's AL Δ and MDE, % of the baseline's AL


def judge(run_dir: Path, baseline: Any) -> Outcome:
    comp = judging.judge(load_run(run_dir), baseline, baseline_name="gate-power-baseline")
    kinds = sorted({str(getattr(f.kind, "value", f.kind)) for f in comp.diagnoses if f.exit_code != 0})
    under_f = any(str(getattr(f.kind, "value", f.kind)) == "underpowered" for f in comp.diagnoses)
    under_c = any(getattr(c, "underpowered", False) for c in comp.checks)
    eager = [c for c in comp.checks if c.cell == CELLS[0]]
    deltas = [100 * float(c.delta) for c in eager if c.delta is not None]
    mdes = [100 * float(m) for c in eager if (m := getattr(c, "mde", None)) is not None]
    ls = [x for x in getattr(comp, "lengths", []) if x.cell == CELLS[0] and x.delta is not None and x.base_al]
    al = None if not ls else (100 * ls[0].delta / ls[0].base_al, 100 * (ls[0].mde or math.nan) / ls[0].base_al)
    return Outcome(int(comp.exit_code), kinds, under_f, under_c, deltas, mdes, al)


# --- scenarios ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # identical | harmless | drop
    pos: int = -1
    pts: float = 0.0
    cells: int = 0  # cells with the drop
    shift: bool = False
    al: bool = False  # a drop of `pts` % of the acceptance length (every position's conditional rate scaled)


def scenarios(deltas: list[float], gate_drop: float, both_cells: bool) -> list[Scenario]:
    out = [
        Scenario("identical", "identical"),
        Scenario("harmless", "harmless"),
        Scenario("harmless+shift", "harmless", shift=True),
    ]
    for pct_ in AL_DROPS:
        out.append(Scenario(f"AL drop {pct_:g} %, 1 cell", "drop", -1, pct_, 1, al=True))
    if both_cells:
        out.append(Scenario(f"AL drop {AL_DELTA:g} %, 2 cells", "drop", -1, AL_DELTA, 2, al=True))
    for pts in deltas:
        for pos in range(K):
            out.append(Scenario(f"drop {pts:g} pts pos{pos}, 1 cell", "drop", pos, pts, 1))
    if both_cells:
        for pos in range(K):
            out.append(Scenario(f"drop {gate_drop:g} pts pos{pos}, 2 cells", "drop", pos, gate_drop, 2))
    return out


@dataclass(frozen=True)
class Setting:
    truth: str
    prompts: int
    burst: str
    role: str  # main | burstiness | sizing | small

    @property
    def label(self) -> str:
        return f"{self.truth}, {self.prompts} prompts, {self.burst}"


def rate(hits: int, n: int) -> dict[str, Any]:
    ci = wilson(hits, n, 0.95)
    return {"hits": hits, "n": n, "rate": hits / n if n else None, "ci95": None if ci is None else [ci.low, ci.high]}


def run_setting(
    s: Setting, scens: list[Scenario], n_harmless: int, n_drop: int, seed: int, work: Path, log: Any
) -> dict[str, Any]:
    t = truth_for(s.truth, s.prompts)
    b = BURSTS[s.burst]
    rng = np.random.default_rng([seed, s.prompts, list(BURSTS).index(s.burst), ord(s.truth[0])])
    n_max = max(n_harmless, n_drop)
    # One independent baseline per replicate, shared by the scenarios (each scenario's runs stay independent).
    bd = [simulate(t, np.ones(K), b, n_max, rng) for _ in CELLS]
    baselines = []
    for r in range(n_max):
        p = write_run(work / f"b{r}", t, {c: (bd[j][0][r], bd[j][1][r]) for j, c in enumerate(CELLS)}, "")
        baselines.append(baseline_of_run(load_run(p), "gate-power-baseline"))
    res: dict[str, Any] = {
        "setting": s.__dict__ | {"label": s.label},
        "truth": t.describe(),
        "burst": b.__dict__ | {"model": b.describe()},
        "scenarios": {},
    }
    for sc in scens:
        n = (
            n_drop
            if sc.kind == "drop"
            else max(min(n_harmless, n_drop) // 2, 1)
            if sc.kind == "identical"
            else n_harmless
        )
        t0 = time.monotonic()
        draws = {}
        for j, c in enumerate(CELLS):
            if sc.kind == "identical":  # the baseline's own records: a check of the harness, Δ = 0 exactly
                draws[c] = (bd[j][0][:n], bd[j][1][:n])
                continue
            dropped = sc.kind == "drop" and (sc.cells == 2 or c == GRAPH_CELL)
            scale = (al_scale(t, sc.pts) if sc.al else drop_scale(t, sc.pos, sc.pts)) if dropped else np.ones(K)
            draws[c] = simulate(t, scale, b, n, rng, shift=sc.shift)
        outs = []
        for r in range(n):
            p = write_run(
                work / f"{re.sub('[^A-Za-z0-9]+', '-', sc.name)}-{r}",
                t,
                {c: (draws[c][0][r], draws[c][1][r]) for c in CELLS},
                "gate-power-baseline.yaml",
            )
            outs.append(judge(p, baselines[r]))
        codes = Counter(o.exit_code for o in outs)
        kinds = Counter(k for o in outs for k in o.kinds)
        d = np.array([o.deltas for o in outs if len(o.deltas) == K]).reshape(-1, K)
        m = np.array([o.mdes for o in outs if len(o.mdes) == K]).reshape(-1, K)
        a = np.array([o.al for o in outs if o.al is not None]).reshape(-1, 2)
        entry = {
            "kind": sc.kind,
            "al": sc.al,
            "pos": sc.pos,
            "pts": sc.pts,
            "eager_al_delta_sd_pct": round(float(a[:, 0].std(ddof=1)), 3) if len(a) > 1 else None,
            "eager_al_mde_median_pct": round(float(np.median(a[:, 1])), 3) if len(a) else None,
            "cells": sc.cells,
            "shift": sc.shift,
            "n": n,
            "exit_codes": {str(k): v for k, v in sorted(codes.items())},
            "finding_kinds": dict(sorted(kinds.items())),
            "any_nonzero": rate(sum(o.exit_code != 0 for o in outs), n),
            "exit1": rate(sum(o.exit_code == 1 for o in outs), n),
            "underpowered_finding": rate(sum(o.underpowered_finding for o in outs), n),
            "underpowered_check": rate(sum(o.underpowered_check for o in outs), n),
            "eager_delta_sd_pts": [round(float(x), 3) for x in d.std(axis=0, ddof=1)] if len(d) > 1 else None,
            "eager_delta_mean_pts": [round(float(x), 3) for x in d.mean(axis=0)] if len(d) else None,
            "eager_mde_median_pts": [round(float(x), 3) for x in np.median(m, axis=0)] if len(m) else None,
            "seconds": round(time.monotonic() - t0, 1),
        }
        res["scenarios"][sc.name] = entry
        main = entry["exit1"] if sc.kind == "drop" else entry["any_nonzero"]
        what = "exit 1" if sc.kind == "drop" else "fail (any non-zero)"
        print(
            f"{s.label:38} {sc.name:28} {what:20} {main['hits']:4}/{n:<4} = {main['rate']:6.1%} "
            f"[{main['ci95'][0]:.1%}, {main['ci95'][1]:.1%}]  codes {entry['exit_codes']}",
            file=log,
            flush=True,
        )
        for p in work.glob("[!b]*"):
            _rmtree(p)
    for p in work.iterdir():
        _rmtree(p)
    return res


def _rmtree(p: Path) -> None:
    import shutil

    shutil.rmtree(p, ignore_errors=True)


# --- the plan and the report ------------------------------------------------------------------------


# Runs per role, as shares of --harmless and --drop: the goals' settings (the shipped default and a
# Gemma4-sized run) get the most harmless runs, since a 1 % rate needs hundreds of runs to be told from 2 %.
ROLE_RUNS = {
    "main": (1.0, 1.0),
    "gate": (0.375, 0.5),
    "small": (0.375, 0.5),
    "burstiness": (0.375, 0.5),
    "sizing": (0.375, 0.75),
}


# The files whose uncommitted changes would make the commit named in the report not the rule measured.
RULE_FILES = ("mtpbench/judge", "mtpbench/specs.py", "mtpbench/config.py", "mtpbench/errors.py", "mtpbench/store")


def plan(quick: bool) -> tuple[list[Setting], int, int, list[float]]:
    if quick:
        return [Setting("tiny", 40, "bursty", "main")], 30, 30, [20.0]
    n_tiny = len(tiny_truth().ids)
    settings = [
        Setting("tiny", n_tiny, "bursty", "main"),
        Setting("gemma4-like", 40, "bursty", "main"),
        # The gate configs' size (configs/gemma4-mtp-{ascend,cuda}-gate.yaml: HumanEval's 150 prompts of at most
        # 800 bytes) with a Gemma4-like spread; under the tiny pair's spread it is the shipped default's size.
        Setting("gemma4-like", 150, "bursty", "gate"),
        Setting("tiny", 5, "bursty", "small"),
        Setting("tiny", 40, "bursty", "sizing"),
        Setting("tiny", 80, "bursty", "sizing"),
        Setting("gemma4-like", 20, "bursty", "sizing"),
        Setting("tiny", n_tiny, "very-bursty", "burstiness"),
        Setting("gemma4-like", 40, "very-bursty", "burstiness"),
    ]
    return settings, 0, 0, [5.0]


def gate_fields() -> dict[str, Any]:
    return GateSpec().model_dump()


def gate_drop(g: dict[str, Any]) -> float:
    """δ, whatever the field is called in this checkout."""
    for key in ("drop_pts", "delta_pts", "tolerance_pts"):
        if key in g:
            return float(g[key])
    raise SystemExit(f"GateSpec has no δ field I know: {sorted(g)}")


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def pct(x: dict[str, Any]) -> str:
    lo, hi = x["ci95"]
    return f"{x['rate']:.1%} [{lo:.1%}, {hi:.1%}]"


# The truths, in the order the report lists them.
TRUTHS = ["tiny", "gemma4-like"]


def render(data: dict[str, Any]) -> str:
    """The Markdown report of one measurement (`data`: the JSON written beside it), section by section."""
    rows = _ordered_results(data)
    return "\n".join([*_preamble(data), *_summary(data, rows), *_settings(rows), *_regenerate(data)])


def _preamble(data: dict[str, Any]) -> list[str]:
    """What was measured, with which gate, what a run is, and the noise model."""
    g, drop = data["gate"], data["gate_drop_pts"]
    dirty = f" (with uncommitted changes to {', '.join(data['dirty'])})" if data["dirty"] else ""
    out = [
        "# The gate's decision rule under prompt-level, bursty noise",
        "",
        f"Produced by `{data['command']}` (seed {data['seed']}; N = {data['n_harmless']} harmless runs and "
        f"{data['n_drop']} runs per drop scenario in the two main settings (bold below), fewer in the others: "
        f"each table gives its runs; {data['minutes']:.1f} min on this 2-core box) at commit "
        f"`{data['commit']}`{dirty}. "
        "Raw figures: `gate_power.json` beside this file. Every run below is written in mtpbench's "
        "on-disk format and judged by `mtpbench.judge.compare.judge` with the gate's defaults "
        "(`GateSpec()` of this checkout): the rule measured is the one the code implements, not a copy of it.",
        "",
        f"Gate: δ = {drop:g} pts ({data['gate_drop_field']}), "
        + ", ".join(f"{k} = {v}" for k, v in g.items() if k != data["gate_drop_field"])
        + ".",
        "",
        "## What a run is",
        "",
        "- Two cells of one build, `current/eager/stock` and `current/graph/stock` (a graph mode whose reference "
        "is eager, so the graph-divergence check runs too), one repeat each, greedy, k = 3, one record per prompt.",
        "- Its baseline: another run drawn independently from the same truth, saved by the real `baseline save` "
        "path (`baseline_of_run`, per-prompt counts: the comparison is prompt-paired).",
        "- Outcome: `comparison.exit_code` (0 pass, 1 regression or graph divergence, 5 inconclusive ...). "
        "A harmless run *fails* on any non-zero exit; a drop is *caught* on exit 1.",
        "- Intervals are Wilson 95 % intervals on the run counts (runs are independent).",
        "",
        "## The noise model",
        "",
        "- **Truths** (per prompt: a token budget and unconditional per-position rates): "
        + "; ".join(
            f"{v['name']} ({v['prompts']} prompts, {v['drafts']} drafts, {v['drafts_per_prompt'][0]}-"
            f"{v['drafts_per_prompt'][1]} a prompt, pooled {'/'.join(f'{x:g}' for x in v['pooled_pct'])} %)"
            for v in data["truths"].values()
        )
        + f". `tiny` is the eager entry of `{data.get('tiny_baseline', 'baselines/tiny-gemma4-mtp-cpu.yaml')}`; "
        "`gemma4-like` is drawn from a "
        "fixed seed (per-prompt conditional rates from Beta(25m, 25(1-m)), rejections rescaled to the pooled "
        "target, draft counts log-uniform in 32-231). Fewer prompts than a truth has: an evenly spaced subset; "
        "more: its prompts repeated under new ids (tiny), the generator drawn further (Gemma4-like).",
        "- **Bursty drafts**: per prompt a hidden easy/hard regime, a two-state Markov chain over its drafts "
        "(started in its stationary distribution). The hard regime takes a share κ of the prompt's rejections "
        "on a share π of its drafts (π raised where a prompt's rejections need it), so the prompt's mean rates "
        "are its truth's. Within a regime each position is accepted with its conditional rate, position i only "
        "if i-1 was (the prefix property). A prompt drafts until it has generated its token budget (1 + accepted "
        "tokens per draft), so a prompt that accepts less drafts more, as under max_tokens. Burstiness levels: "
        + "; ".join(f"**{k}**: {v['model']}" for k, v in data["bursts"].items())
        + ".",
        "- **Harmless change**: every prompt's trajectory re-drawn from the same truth. **harmless+shift**: also "
        f"each prompt's rejection rate times exp(ε), ε ~ N(0, {SHIFT_SIGMA}²) per prompt and run, rescaled so the "
        "pooled rates stay the truth's (helps some prompts, hurts others, averages to zero).",
        "- **AL drop of d %**: every prompt's conditional rates at every position scaled by one common factor s "
        "(position j's unconditional rate by s^(j+1)) so that the truth's pooled acceptance length falls by d %; in "
        "the graph cell only (`1 cell`) or in both cells.",
        "- **Drop of d pts at position j**: every prompt's conditional rate at j scaled so that the pooled rate at "
        "j falls by d points (later positions fall with it); in the graph cell only (`1 cell`) or in both cells.",
        "",
    ]
    return out


def _ordered_results(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The settings in the tables' order: bursty first, then by burstiness, truth and prompts."""
    bursts = list(BURSTS)
    return sorted(
        data["results"],
        key=lambda r: (
            r["setting"]["burst"] != "bursty",
            bursts.index(r["setting"]["burst"]),
            TRUTHS.index(r["setting"]["truth"]),
            r["setting"]["prompts"],
        ),
    )


def _summary(data: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The goals, one row per setting (false alarms, power, goals met), then the sizing lines."""
    drop = data["gate_drop_pts"]
    out = [
        "## Summary",
        "",
        f"Goals: at most {GOAL_FALSE_ALARM:.0%} of harmless runs fail (any non-zero exit), with and without "
        f"per-prompt shifts, and at least {GOAL_POWER:.0%} of runs with a drop of the δ the gate certifies exit 1: "
        f"the default gate certifies acceptance length, δ = {AL_DELTA:g} % of the baseline's AL (`AL δ caught`, the "
        "drop in one cell). *Met* = every point estimate meets its goal; the Wilson 95 % intervals say how sure "
        "that is. The per-position columns are the diagnoses' reach: a 5-pt drop at one position alone (pos2 alone "
        "moves AL by ~1.3 %, well under δ) fails the run only when its own check finds it significant. Bold: the "
        "shipped default's size, the Gemma4-sized run and the gate configs' size. *harmless exit 1*: harmless "
        "runs called a regression or graph divergence (what the run's false-alarm budget controls); the rest of "
        "*harmless fails* is exit 5, "
        "inconclusive (the run could not certify δ).",
        "",
        f"| setting | harmless fails | harmless+shift fails | AL δ caught | {drop:g} pts pos0 caught | "
        f"{drop:g} pts pos1 caught | {drop:g} pts pos2 caught | goals met | harmless exit 1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    smallest: dict[str, list[int]] = {}
    for r in rows:
        sc = r["scenarios"]
        fa = [sc[k]["any_nonzero"] for k in ("harmless", "harmless+shift")]
        al = next(v["exit1"] for v in sc.values() if v.get("al") and v["pts"] == AL_DELTA and v["cells"] == 1)
        pw = [
            next(
                v["exit1"]
                for v in sc.values()
                if v["kind"] == "drop" and not v.get("al") and v["pts"] == drop and v["cells"] == 1 and v["pos"] == pos
            )
            for pos in range(K)
        ]
        met = all(f["rate"] <= GOAL_FALSE_ALARM for f in fa) and al["rate"] >= GOAL_POWER
        if r["setting"]["burst"] == "bursty" and met:
            smallest.setdefault(r["setting"]["truth"], []).append(r["setting"]["prompts"])
        label = r["setting"]["label"]
        label = f"**{label}**" if r["setting"]["role"] in ("main", "gate") else label
        ex1 = sc["harmless"]["exit1"]
        out.append(
            f"| {label} | {' | '.join(pct(x) for x in (*fa, al, *pw))} | {'yes' if met else '**no**'} | {pct(ex1)} |"
        )
    out += [""]
    return out + _sizing(rows, smallest)


def _sizing(rows: list[dict[str, Any]], smallest: dict[str, list[int]]) -> list[str]:
    """Per truth, the fewest prompts tried (bursty) whose run meets both goals."""
    out: list[str] = []
    for t in TRUTHS:
        tried = sorted(
            {r["setting"]["prompts"] for r in rows if r["setting"]["truth"] == t and r["setting"]["burst"] == "bursty"}
        )
        got = min(smallest.get(t, []), default=None)
        out.append(
            f"Sizing, {t}, bursty: "
            + (
                f"{got} prompts is the fewest tried ({', '.join(map(str, tried))}) that meets both goals."
                if got
                else f"none of {', '.join(map(str, tried))} prompts meets both goals."
            )
        )
        out.append("")
    return out


def _settings(rows: list[dict[str, Any]]) -> list[str]:
    """A section per role (the main settings, 5 prompts, sizing, burstiness), a table per setting."""
    out: list[str] = [""]
    titles = {
        "main": "The shipped default's size and a Gemma4-sized run",
        "gate": "The gate configs' size: 150 HumanEval prompts, Gemma4-like spread",
        "small": "5 prompts",
        "sizing": "Sizing: how many prompts certify δ",
        "burstiness": "Burstiness",
    }
    for role, title in titles.items():
        sel = [r for r in rows if r["setting"]["role"] == role]
        if not sel:
            continue
        out += [f"## {title}", ""]
        for r in sel:
            out += _setting(r)
    return out


def _setting(r: dict[str, Any]) -> list[str]:
    """One setting: its harmless runs' deltas and MDEs, then a row per scenario."""
    out: list[str] = []
    h = r["scenarios"]["harmless"]
    out += [
        f"### {r['setting']['label']}",
        "",
        "Harmless runs, eager cell, per position: Δ mean "
        + ", ".join(f"{x:+.2f}" for x in h["eager_delta_mean_pts"] or [])
        + " pts, SD "
        + ", ".join(f"{x:.2f}" for x in h["eager_delta_sd_pts"] or [])
        + " pts; median smallest detectable drop (the rule's MDE) "
        + ", ".join(f"{x:.2f}" for x in h["eager_mde_median_pts"] or [])
        + " pts. Acceptance length: Δ SD "
        + f"{h.get('eager_al_delta_sd_pct') or 0:.2f} % of the baseline's AL, median MDE "
        + f"{h.get('eager_al_mde_median_pct') or 0:.2f} % (δ = {AL_DELTA:g} %).",
        "",
        "`identical`: the run is its baseline's own records, so every Δ is 0; its two cells are still "
        "independent draws, so only the graph-divergence check can fail it.",
        "",
        "| scenario | runs | exit 1 | any non-zero | `underpowered` finding | a check underpowered | "
        "exit codes (runs) | failing findings (runs) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in r["scenarios"].items():
        codes = ", ".join(f"{k}: {n}" for k, n in v["exit_codes"].items())
        kinds = ", ".join(f"{k}: {n}" for k, n in v["finding_kinds"].items()) or "none"
        out.append(
            f"| {name} | {v['n']} | {pct(v['exit1'])} | {pct(v['any_nonzero'])} | "
            f"{pct(v['underpowered_finding'])} | {pct(v['underpowered_check'])} | {codes} | {kinds} |"
        )
    out.append("")
    return out


def _regenerate(data: dict[str, Any]) -> list[str]:
    return [
        "## Regenerate",
        "",
        f"`{data['command']}` (`--quick`: the smoke run the tests use; `--render JSON`: this page from its JSON).",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one setting, 30 runs per scenario (under a minute)")
    ap.add_argument(
        "--harmless",
        type=int,
        default=None,
        help="harmless runs per scenario in the 40-prompt bursty settings (default 400; others get a share)",
    )
    ap.add_argument("--drop", type=int, default=None, help="runs per drop scenario there (default 100)")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--tiny-baseline", type=Path, default=None, help="the baseline whose eager entry is `tiny`")
    ap.add_argument("--only", default=None, help="run the settings whose label contains this text")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here (default: beside the report)")
    ap.add_argument("--md", type=Path, default=None, help="write the report here")
    ap.add_argument("--no-report", action="store_true", help="print only")
    ap.add_argument("--render", type=Path, default=None, help="only rewrite the report from this JSON (no runs)")
    args = ap.parse_args(argv)
    if args.render:
        (args.md or REPORT_MD).write_text(render(json.loads(args.render.read_text())))
        return 0
    global TINY_BASELINE
    if args.tiny_baseline is not None:
        TINY_BASELINE = args.tiny_baseline.resolve()
    settings, nh, nd, deltas = plan(args.quick)
    if not args.quick:
        nh, nd = 400, 100
    nh, nd = args.harmless or nh, args.drop or nd
    if args.only:
        settings = [s for s in settings if args.only in s.label]
    g = gate_fields()
    drop = gate_drop(g)
    field_name = next(k for k in ("drop_pts", "delta_pts", "tolerance_pts") if k in g)
    deltas = sorted({*deltas, drop})
    t0 = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="gate-power-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as d:
        for s in settings:
            scens = scenarios(deltas if s.role in ("main", "small") else [drop], drop, s.role == "main")
            if s.role not in ("main", "small"):
                scens = [x for x in scens if x.kind != "identical"]
            share_h, share_d = ROLE_RUNS[s.role]
            n_h, n_d = max(round(nh * share_h), 1), max(round(nd * share_d), 1)
            results.append(run_setting(s, scens, n_h, n_d, args.seed, Path(d), sys.stdout))
    cmd = "python benchmarks/gate_power.py" + (" --quick" if args.quick else "")
    cmd += (
        "".join(
            f" --{k} {v}"
            for k, v in (("harmless", args.harmless), ("drop", args.drop), ("only", args.only))
            if v is not None
        )
        + (f" --seed {args.seed}" if args.seed != 19 else "")
        + (f" --tiny-baseline {args.tiny_baseline}" if args.tiny_baseline else "")
    )
    data = {
        "command": cmd,
        "seed": args.seed,
        "n_harmless": nh,
        "n_drop": nd,
        "minutes": (time.monotonic() - t0) / 60,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": _git("status", "--porcelain", "--", *RULE_FILES).splitlines(),
        "gate": g,
        "gate_drop_pts": drop,
        "gate_drop_field": field_name,
        "goals": {"harmless_fail_max": GOAL_FALSE_ALARM, "power_min": GOAL_POWER},
        "truths": {r["truth"]["name"]: r["truth"] for r in results if r["setting"]["role"] == "main"},
        "tiny_baseline": str(TINY_BASELINE.relative_to(REPO) if TINY_BASELINE.is_relative_to(REPO) else TINY_BASELINE),
        "bursts": {k: b.__dict__ | {"model": b.describe()} for k, b in BURSTS.items()},
        "results": results,
    }
    if not args.no_report:
        (args.json or REPORT_JSON).write_text(json.dumps(data, indent=1) + "\n")
        (args.md or REPORT_MD).write_text(render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
