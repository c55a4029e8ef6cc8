"""The release sweep's table (README, docs/builds.md) from one or more runs of
configs/tiny-gemma4-mtp-releases.yaml: per build and mode, the vllm version the cells imported, the
per-position acceptance and AL pooled over the prompts (vLLM's own counters), the engine start-up and
generation seconds, the seconds the build's environment took to provision (its stamp), and whether the
prompts' counts equal the reference cell's (the first of the cells that measured the most prompts), prompt by
prompt, on the prompts both cells measured.

    python benchmarks/release_table.py RUN[=BUILD/MODE,...] [RUN[=BUILD/MODE,...]...]

`=BUILD/MODE,...` after a run folder keeps only those cells of it, so one table can take each release
from the run that measured it (e.g. the sequential releases from a shorter run, when the box had no time for
150 prompts one at a time). A cell that never started (pending) has nothing to show and is left out.
"""

from __future__ import annotations

import json
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
        builds = run.manifest["config"]["builds"]
        counts: dict[tuple[str, str], dict[str, tuple[int, tuple[int, ...]]]] = defaultdict(dict)
        for r in run.records:
            if r.get("type") == "prompt":
                counts[(r["build"], r["mode"])][r["prompt_id"]] = (r["num_drafts"], tuple(r["accepted_per_pos"]))
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
                    "build": cell["build"],
                    "mode": cell["mode"],
                    "status": cell.get("status"),
                    "error": (cell.get("error") or "").splitlines()[0] if cell.get("error") else "",
                    "vllm": ((start.get("env") or {}).get("versions") or {}).get("vllm"),
                    "prompt_mode": (start.get("prompt_mode") or {}).get("effective"),
                    "prompts": len(per_prompt),
                    "drafts": drafts,
                    "pos_pct": [100 * a / drafts for a in per_pos] if drafts else [],
                    "al": 1 + sum(per_pos) / drafts if drafts else None,
                    "startup_s": engine,
                    "generation_s": wall - engine if wall is not None and engine is not None else None,
                    "provision_s": _stamp(builds[cell["build"]]).get("seconds"),
                    "counts": per_prompt,
                    "run": run_dir.name,
                }
            )
    return out


def same_counts(counts: dict[str, Any], first: dict[str, Any]) -> str:
    """Whether a cell's per-prompt counts equal the reference cell's on the prompts both measured (runs of a
    different length share only a prefix of the prompts: the count of shared prompts says how many)."""
    shared = counts.keys() & first.keys()
    if not shared:
        return "no prompt shared"
    equal = all(counts[p] == first[p] for p in shared)
    word = "yes" if equal else "**no**"
    if shared == counts.keys() == first.keys():
        return word
    return f"{word} (on {len(shared)} shared)"


def markdown(table: list[dict[str, Any]]) -> str:
    # Every cell's per-prompt counts against the reference cell's: the first of those that measured the most
    # prompts, so a shorter run's cells are checked on the prompts they share with it.
    most = max((len(r["counts"]) for r in table), default=0)
    first = next((r["counts"] for r in table if r["counts"] and len(r["counts"]) == most), {})
    lines = [
        "| build | mode | vllm | prompts | drafts | pos0 / pos1 / pos2 % | AL | start-up s | generation s | "
        "provisioned in s | counts = reference cell's |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        prov = f"{r['provision_s']:.1f}" if r["provision_s"] is not None else "-"
        if r["status"] != "ok" or not r["counts"]:
            why = f"failed: {r['error']}" if r["error"] else str(r["status"])
            lines.append(
                f"| {r['build']} | {r['mode']} | {r['vllm'] or '-'} | – | – | {why} | – | – | – | {prov} | – |"
            )
            continue
        pos = " / ".join(f"{p:.1f}" for p in r["pos_pct"])
        same = same_counts(r["counts"], first)
        prompts = f"{r['prompts']} ({r['prompt_mode']})"
        lines.append(
            f"| {r['build']} | {r['mode']} | {r['vllm']} | {prompts} | {r['drafts']} | {pos} | {r['al']:.2f} | "
            f"{r['startup_s']:.1f} | {r['generation_s']:.1f} | {prov} | {same} |"
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
