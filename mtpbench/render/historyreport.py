"""Rendering of `mtpbench history`: a rich table per comparable group and cell (one row per run, the
change points marked), the change points with their reasons, JSON, and optional HTML / PNG trend plots.
Groups that are not comparable are rendered apart, each under the fingerprint that sets it apart.
No arithmetic beyond fractions → percentages; the numbers come from history.py.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from mtpbench import __version__
from mtpbench.errors import UserError
from mtpbench.judge.history import History, HistoryGroup, RunPoint


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def key_text(g: HistoryGroup) -> str:
    k = g.key
    return (
        f"model {k.get('model')} ({str(k.get('model_config_sha256'))[:12]}), drafter "
        f"{str(k.get('drafter_config_sha256'))[:12]}, {k.get('method')} k={k.get('num_speculative_tokens')}, "
        f"prompts {str(k.get('prompts_sha256'))[:12]}, sampling {json.dumps(k.get('sampling'), sort_keys=True)}"
    )


def _differs(a: HistoryGroup, b: HistoryGroup) -> str:
    keys = sorted(set(a.key) | set(b.key))
    return ", ".join(k for k in keys if a.key.get(k) != b.key.get(k))


def _status(r: RunPoint, cell: str) -> Text | str:
    """A cell the run did not have is 'absent', not 'ok' (it was never measured there)."""
    if cell not in r.counts and cell not in r.incomplete:
        return Text("absent", style="dim")
    return Text("partial", style="yellow") if cell in r.incomplete else "ok"


def group_tables(g: HistoryGroup) -> list[Table]:
    out: list[Table] = []
    marks = {(c.cell, c.index) for c in g.change_points}
    for cell in g.cells:
        t = Table(title=cell, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("#", "created", "run", "vllm", "git sha", "drafts"):
            t.add_column(col, justify="right" if col in ("#", "drafts") else "left")
        for i in range(g.k):
            t.add_column(f"pos{i} %", justify="right")
        t.add_column("status")
        t.add_column("change")
        for n, r in enumerate(g.runs):
            c = r.counts.get(cell)
            sha = next((s[:10] for s in r.git_sha.values() if s), "–")
            version = r.versions.get("vllm_ascend") or r.versions.get("vllm") or "–"
            moved = [cp for cp in g.change_points if cp.cell == cell and cp.index == n]
            t.add_row(
                str(n),
                r.created,
                r.run_id,
                version,
                sha,
                "–" if c is None else str(c[0]),
                *[_pct(g.rate(cell, n, i)) for i in range(g.k)],
                _status(r, cell),
                Text(", ".join(f"pos{cp.pos} {100 * cp.delta:+.1f}" for cp in moved), style="bold red")
                if (cell, n) in marks
                else "",
            )
        out.append(t)
    return out


def history_renderable(h: History) -> Group:
    parts: list[Any] = []
    for gi, g in enumerate(h.groups, start=1):
        head = Text(f"group {gi}: {len(g.runs)} run(s) of {key_text(g)}", style="bold")
        if gi > 1:
            head.append(
                f"\n  not comparable with group 1 ({_differs(h.groups[0], g)} differ): shown apart", style="yellow"
            )
        parts.append(head)
        parts.extend(group_tables(g))
        if not g.change_points:
            parts.append(
                Text(
                    f"no change point: no position moved by more than {g.tolerance_pts:g} pts with support",
                    style="green",
                )
            )
        for cp in g.change_points:
            parts.append(Text(f"CHANGE {cp.cell} at run #{cp.index} {cp.run_id}: {cp.why}", style="red"))
        first = g.first
        if first is not None:
            parts.append(Text(f"first change: run {first.run_id} ({first.cell} pos{first.pos})", style="bold red"))
    for s in h.skipped:
        parts.append(Text(f"skipped {s}", style="yellow"))
    return Group(*parts)


def history_json(h: History) -> str:
    data = {
        "tool": "mtpbench",
        "version": __version__,
        "groups": [
            {
                "key": g.key,
                "tolerance_pts": g.tolerance_pts,
                "runs": [
                    {
                        "run_id": r.run_id,
                        "path": str(r.path),
                        "created": r.created,
                        "versions": r.versions,
                        "git_sha": r.git_sha,
                        "cells": {
                            c: {
                                "num_drafts": v[0],
                                "accepted_per_pos": v[1],
                                "per_pos": [a / v[0] if v[0] else None for a in v[1]],
                            }
                            for c, v in r.counts.items()
                        },
                    }
                    for r in g.runs
                ],
                "change_points": [
                    {
                        "cell": c.cell,
                        "pos": c.pos,
                        "run_id": c.run_id,
                        "index": c.index,
                        "before": c.before,
                        "after": c.after,
                        "delta": c.delta,
                        "ci": None if c.ci is None else [c.ci.low, c.ci.high],
                        "pvalue": c.pvalue,
                        "changed": c.changed,
                        "why": c.why,
                    }
                    for c in g.change_points
                ],
                "first_change": None if g.first is None else g.first.run_id,
            }
            for g in h.groups
        ],
        "skipped": h.skipped,
    }
    return json.dumps(data, indent=2)


def _html_page(h: History, svgs: list[str]) -> str:
    e = html.escape
    body: list[str] = []
    for gi, (g, svg) in enumerate(zip(h.groups, svgs, strict=True), start=1):
        body.append(f"<h2>Group {gi}: {len(g.runs)} run(s)</h2><p class='meta'>{e(key_text(g))}</p>")
        if gi > 1:
            body.append(
                f"<p class='apart'>Not comparable with group 1 ({e(_differs(h.groups[0], g))} differ): shown apart.</p>"
            )
        cps = (
            "".join(
                f"<li><b>{e(c.cell)}</b> at run <code>{e(c.run_id)}</code>: {e(c.why)}</li>" for c in g.change_points
            )
            or "<li>no change point</li>"
        )
        body.append(f"<ul>{cps}</ul><figure class='trend'>{svg}</figure>")
        for cell in g.cells:
            head = "".join(f"<th>pos{i} %</th>" for i in range(g.k))
            rows = "".join(
                f"<tr><td>{n}</td><td>{e(r.created)}</td><td><code>{e(r.run_id)}</code></td><td>{e(r.label)}</td>"
                + "".join(f"<td>{_pct(g.rate(cell, n, i))}</td>" for i in range(g.k))
                + "</tr>"
                for n, r in enumerate(g.runs)
            )
            body.append(
                f"<h3>{e(cell)}</h3><table><tr><th>#</th><th>created</th><th>run</th><th>build</th>{head}"
                f"</tr>{rows}</table>"
            )
    css = (
        "body{font:14px/1.45 system-ui,sans-serif;max-width:1200px;margin:1.5rem auto;padding:0 1rem}"
        "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.2rem .5rem}.meta{color:#555}"
        ".apart{color:#8d6e00}figure svg{max-width:100%;height:auto}"
    )
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>mtpbench history</title>"
        f"<style>{css}</style></head><body><h1>mtpbench history</h1>{''.join(body)}"
        f"<p class='meta'>mtpbench {e(__version__)}</p></body></html>\n"
    )


def write_outputs(h: History, html_path: Path | None, png_dir: Path | None) -> list[Path]:
    if html_path is None and png_dir is None:
        return []
    import mtpbench.render.plots as plots

    plt = plots.require()
    written: list[Path] = []
    figs = [plots.history_figure(g) for g in h.groups]
    try:
        if png_dir is not None:
            for gi, f in enumerate(figs, start=1):
                written.append(plots.save_png(f, png_dir / f"history-group{gi}.png", close=False))
        if html_path is not None:
            page = _html_page(h, [plots.svg(f, close=False) for f in figs])
            try:
                html_path.parent.mkdir(parents=True, exist_ok=True)
                html_path.write_text(page, encoding="utf-8")
            except OSError as exc:
                raise UserError(f"{html_path}: cannot write: {exc}") from None
            written.append(html_path)
    finally:
        for f in figs:
            plt.close(f)
    return written
