"""The serving table: per cell, requests ok/total, req/s, output tok/s, TTFT / TPOT percentiles, the pooled
per-position acceptance with its request-clustered interval, pooled and per-request-mean acceptance length,
whether `/metrics` equals the per-request sum, and where the acceptance comes from (a concurrency sweep adds
one row per level under its cell); as a rich table, as
Markdown, and as the `serving` part of the JSON document. The figures are judge/signals/serving_summary.py's; one row
builder feeds every renderer, and none does arithmetic beyond units.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from rich import box
from rich.table import Table

from mtpbench.judge.signals.serving_summary import COUNTERS_ONLY_METHOD, PER_REQUEST, LevelRow, Percentiles, ServingCell
from mtpbench.render.words.positions import POSITIONS_NOTE, conditional_title, unconditional_title
from mtpbench.schema import COUNTERS_ONLY


def _p(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}"


def _ms(p: Percentiles) -> str:
    if p.p50 is None or p.p99 is None:
        return "–"
    return f"{1000 * p.p50:.0f}/{1000 * p.p99:.0f}"


def _num(x: float | None, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def serving_rows(cells: list[ServingCell]) -> tuple[list[str], list[list[str]]]:
    """One header and row builder for the table and Markdown renderers."""
    k = max((len(c.pooled_per_pos) for c in cells), default=0)
    head = [
        "cell",
        "requests\nok",
        "req/s",
        "out\ntok/s",
        "TTFT ms\np50/p99",
        "TPOT ms\np50/p99",
        *[f"{unconditional_title(i)}\n[95% CI]" for i in range(k)],
        *[conditional_title(i) for i in range(1, k)],
        "mean %\npooled",
        "AL\npooled",
        "AL\nreq mean",
        "/metrics\n= sum",
        "acceptance\nfrom",
    ]
    rows = []
    for c in cells:
        match = _match(c.counts_match)
        rows.append(
            [
                c.cell,
                f"{c.requests_ok}/{c.requests_total}",
                _num(c.req_per_s, ".2f"),
                _num(c.output_tok_per_s, ".0f"),
                _ms(c.ttft_s),
                _ms(c.tpot_s),
                *[
                    f"{_p(r)}\n[{_p(ci.low)},{_p(ci.high)}]" if ci else _p(r)
                    for r, ci in zip(c.pooled_per_pos, c.pooled_per_pos_ci, strict=True)
                ],
                *[_p(c.pooled_conditional[i]) if i < len(c.pooled_conditional) else "" for i in range(1, k)],
                _p(c.pooled_mean),
                _num(c.pooled_al, ".2f"),
                _num(c.mean_request_al, ".2f"),
                match,
                COUNTERS_ONLY_METHOD if c.acceptance == COUNTERS_ONLY else PER_REQUEST,
            ]
        )
        rows.extend(_level_row(level) for level in c.levels)
    return head, rows


def _match(counts_match: list[bool | None]) -> str:
    if counts_match and all(m is True for m in counts_match):
        return "yes"
    return "NO" if any(m is False for m in counts_match) else "n/a"


def _level_row(level: LevelRow) -> list[str]:
    """A concurrency sweep's level under its cell's row (the cell's row pools every level)."""
    return [
        f"  └ concurrency {level.concurrency}",
        f"{level.requests_ok}/{level.requests_total}",
        _num(level.req_per_s, ".2f"),
        _num(level.output_tok_per_s, ".0f"),
        _ms(level.ttft_s),
        _ms(level.tpot_s),
        *[_p(r) for r in level.pooled_per_pos],
        *["" for _ in level.pooled_per_pos[1:]],
        _p(level.pooled_mean),
        _num(level.pooled_al, ".2f"),
        "–",
        _match(level.counts_match),
        "",
    ]


def serving_table(cells: list[ServingCell]) -> Table:
    head, rows = serving_rows(cells)
    t = Table(
        title=f"serving load: {POSITIONS_NOTE}; pos/mean/AL pooled = accepted/drafts over all requests "
        "(as /metrics and vllm bench serve), CI clustered by request; "
        "AL req mean = mean over requests of 1 + accepted/drafts; "
        "/metrics = sum: the counter deltas equal the per-request counts; └ concurrency N: one level of a "
        "concurrency sweep (the cell's row pools every level); counters-only: the build returned no "
        "per-request counts, acceptance is the /metrics deltas pooled over the load (no interval)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
    )
    for i, h in enumerate(head):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=i != 0)
    for r in rows:
        style = "red" if r[1].split("/")[0] != r[1].split("/")[1] or r[-2] == "NO" else None
        t.add_row(*r, style=style)
    return t


def serving_markdown(cells: list[ServingCell]) -> str:
    head, rows = serving_rows(cells)
    flat = [[x.replace("\n", " ") for x in r] for r in [head, *rows]]
    lines = ["| " + " | ".join(flat[0]) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([f"`{r[0]}`", *r[1:]]) + " |" for r in flat[1:]]
    lines += ["", f"_{POSITIONS_NOTE}_"]
    return "\n".join(lines) + "\n"


def serving_json(cells: list[ServingCell]) -> list[dict[str, Any]]:
    return [asdict(c) for c in cells]


def add_to_json(comparison_json: str, cells: list[ServingCell]) -> str:
    data = json.loads(comparison_json)
    data["serving"] = serving_json(cells)
    return json.dumps(data, indent=2)
