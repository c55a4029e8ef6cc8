"""The release sweep's table (docs/methods.md "Across releases", docs/builds.md) from runs of the release configs
(configs/*-releases*.yaml, one config per speculative method): ONE table, method x release x mode, the method
named with the target's model family (`mtp (gemma4_text)` beside `mtp (deepseek_v3)`), with the vllm version the
cells imported, the per-position acceptance and AL pooled over the prompts (vLLM's own counters), and prompt by
prompt whether a cell's counts are identical to the newest release's in the same method and mode ("identical
prompts: n of shared"), and to its own release's eager cell, and whether its generated text is (output sha256:
the same text with other counts is the drafter's change, other text the target's); then the engine start-up
and generation seconds and the seconds the build's environment took to provision (its stamp).

    python benchmarks/release_table.py RUN[=BUILD/MODE,...] [RUN[=BUILD/MODE,...]...]

`=BUILD/MODE,...` after a run folder keeps only those cells of it, so one table can take each release
from the run that measured it. A cell that never started (pending) has nothing to show and is left out. The
newest release is the last of the config's builds (the release configs list them oldest first) that measured
prompts in that method and mode; a build that failed there is shown with its error.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from mtpbench.run.envs.provision import STAMP
from mtpbench.store.results import load_run


def _stamp(spec: dict[str, Any]) -> dict[str, Any]:
    """The provisioning stamp of a build: beside its provisioned interpreter, or its named one."""
    python = (spec.get("provisioned") or {}).get("python") or spec.get("python")
    if not python:
        return {}
    try:
        return json.loads((Path(python).parent.parent / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def method_label(config: dict[str, Any]) -> str:
    """The speculative method and the target's model family, `mtp (deepseek_v3)`: `mtp` alone names Gemma4's
    MTP and DeepSeek's, different drafters on different targets. The family is the target checkpoint's
    `model_type` (its config.json where the run's config points); the method alone where it cannot be read."""
    method = (config.get("speculative") or {}).get("method") or "-"
    try:
        family = json.loads((Path(config["model"]) / "config.json").read_text(encoding="utf-8"))["model_type"]
    except (KeyError, TypeError, OSError, ValueError):
        return method
    return f"{method} ({family})"


def short_error(error: str) -> str:
    """A cell's error as the table shows it: its first line, a file under an environment's site-packages named
    from there (`(vllm/v1/attention/backends/fa_utils.py)`, not the build's cache path)."""
    first = error.splitlines()[0] if error else ""
    return re.sub(r"/\S*/site-packages/", "", first)


def parse_arg(arg: str) -> tuple[Path, set[tuple[str, str]] | None]:
    """`RUN` or `RUN=BUILD/MODE,...`: the run folder and the cells to keep from it (None: every cell)."""
    folder, sep, cells = arg.partition("=")
    if not sep:
        return Path(folder), None
    keep: set[tuple[str, str]] = set()
    for cell in cells.split(","):
        build, _, mode = cell.partition("/")
        keep.add((build, mode))
    return Path(folder), keep


def rows(runs: list[tuple[Path, set[tuple[str, str]] | None]]) -> list[dict[str, Any]]:
    out = []
    for run_dir, keep in runs:
        run = load_run(run_dir)
        builds = run.manifest["config"].get("builds") or {}
        counts: dict[tuple[str, str], dict[str, tuple[int, tuple[int, ...]]]] = defaultdict(dict)
        texts: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
        for r in run.records:
            if r.get("type") == "prompt":
                counts[(r["build"], r["mode"])][r["prompt_id"]] = (r["num_drafts"], tuple(r["accepted_per_pos"]))
                if r.get("output_sha256"):
                    texts[(r["build"], r["mode"])][r["prompt_id"]] = r["output_sha256"]
        starts = {(s["build"], s["mode"]): s for s in run.cell_starts()}
        for cell in run.manifest["cells"]:
            key = (cell["build"], cell["mode"])
            if keep is not None and key not in keep:
                continue
            if cell.get("status") == "pending":
                continue
            per_prompt = counts.get(key, {})
            drafts = sum(d for d, _ in per_prompt.values())
            k = len(next(iter(per_prompt.values()))[1]) if per_prompt else 0
            per_pos = [sum(a[i] for _, a in per_prompt.values()) for i in range(k)]
            start = starts.get(key, {})
            engine = cell.get("engine_start_s")
            wall = cell.get("wall_s")
            out.append(
                {
                    "method": method_label(run.manifest["config"]),
                    "build": cell["build"],
                    "mode": cell["mode"],
                    "status": cell.get("status"),
                    "error": short_error(cell.get("error") or ""),
                    "vllm": ((start.get("env") or {}).get("versions") or {}).get("vllm"),
                    "prompt_mode": (start.get("prompt_mode") or {}).get("effective"),
                    "prompts": len(per_prompt),
                    "drafts": drafts,
                    "pos_pct": [100 * a / drafts for a in per_pos] if drafts else [],
                    "al": 1 + sum(per_pos) / drafts if drafts else None,
                    "startup_s": engine,
                    "generation_s": wall - engine if wall is not None and engine is not None else None,
                    "provision_s": _stamp(builds.get(cell["build"]) or {}).get("seconds"),
                    "counts": per_prompt,
                    "texts": texts.get(key, {}),
                    "run": run_dir.name,
                }
            )
    return out


def identical(counts: dict[str, Any], other: dict[str, Any] | None) -> str:
    """`n of m`: on the m prompts both cells measured, how many have identical counts (drafts and accepted per
    position); bold where any differs."""
    if other is None:
        return "–"
    shared = counts.keys() & other.keys()
    if not shared:
        return "no prompt shared"
    same = sum(counts[p] == other[p] for p in shared)
    text = f"{same} of {len(shared)}"
    return text if same == len(shared) else f"**{text}**"


def references(table: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(method, mode) -> the newest release's cell that measured prompts: the last in the table's order, which
    is each run's cell order (the config's builds, oldest first)."""
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in table:
        if r["status"] == "ok" and r["counts"]:
            newest[(r["method"], r["mode"])] = r
    return newest


def markdown(table: list[dict[str, Any]]) -> str:
    def seconds(value: float | None) -> str:
        return f"{value:.1f}" if value is not None else "-"

    newest = references(table)
    eager = {(r["method"], r["build"]): r["counts"] for r in table if r["mode"] == "eager" and r["counts"]}
    lines = [
        "| method | build | mode | vllm | prompts | drafts | pos0 / pos1 / pos2 % | AL | "
        "identical to the newest release (same mode) | identical to eager (same release) | "
        "text identical to the newest release | start-up s | generation s | provisioned in s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(table, key=lambda r: (r["method"], r["mode"] != "eager", r["mode"])):
        prov = seconds(r["provision_s"])
        head = f"| {r['method']} | {r['build']} | {r['mode']} | {r['vllm'] or '-'} |"
        if r["status"] != "ok" or not r["counts"]:
            why = f"failed: {r['error']}" if r["error"] else str(r["status"])
            lines.append(f"{head} – | – | {why} | – | – | – | – | – | – | {prov} |")
            continue
        pos = " / ".join(f"{p:.1f}" for p in r["pos_pct"])
        ref = newest.get((r["method"], r["mode"]))
        to_newest = "(newest)" if ref is r else identical(r["counts"], ref["counts"] if ref else None)
        to_eager = "(eager)" if r["mode"] == "eager" else identical(r["counts"], eager.get((r["method"], r["build"])))
        # The text tells a drafter's change (same text, other counts) from the target's (the text moves too).
        text = "(newest)" if ref is r else identical(r["texts"], ref["texts"] if ref and ref["texts"] else None)
        lines.append(
            f"{head} {r['prompts']} ({r['prompt_mode']}) | {r['drafts']} | {pos} | {r['al']:.2f} | {to_newest} | "
            f"{to_eager} | {text} | {seconds(r['startup_s'])} | {seconds(r['generation_s'])} | {prov} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write(__doc__ or "")
        return 2
    sys.stdout.write(markdown(rows([parse_arg(a) for a in argv])) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
