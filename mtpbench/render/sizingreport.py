"""Rendering of sizing.py's answer: per baseline entry and position, the drop the gate can catch with the
current prompts and the prompts it needs to certify δ."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from mtpbench.judge.sizing import Sizing
from mtpbench.specs import GateSpec


def _pts(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def sizing_table(sizes: list[Sizing], gate: GateSpec, prompts: int | None = None) -> Group:
    if not sizes:
        return Group(Text("sizing: the baseline has no per-prompt counts to size from (rates only)", style="yellow"))
    s0 = sizes[0]
    head = Text(
        f"sizing: to certify no drop ≥ {gate.tolerance_pts:g} pts per position ({100 * gate.power:g} % power, "
        f"{100 * gate.false_alarm:g} % false alarms per run over {s0.checks} checks, one-sided α "
        f"{s0.alpha:.2g} each); spread from the {s0.source}",
        style="bold",
    )
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("entry", "prompts", "drafts/prompt", "pos", "se pts", "detectable pts", "prompts needed", ""):
        t.add_column(col, justify="left" if col in ("entry", "") else "right")
    have = prompts
    for s in sizes:
        for p in s.positions:
            n = have if have is not None else s.prompts
            ok = p.prompts_needed is not None and n >= p.prompts_needed
            t.add_row(s.entry, str(s.prompts), f"{s.drafts_per_prompt:.0f}", f"pos{p.pos}", _pts(p.se),
                      _pts(p.detectable), "–" if p.prompts_needed is None else str(p.prompts_needed),
                      Text("enough" if ok else "too few", style="green" if ok else "yellow"))
    return Group(head, t)
