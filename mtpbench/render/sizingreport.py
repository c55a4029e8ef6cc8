"""Rendering of sizing.py's answer: per baseline entry, for acceptance length and each position, the drop the
gate can catch with the current prompts and the prompts it needs to certify δ."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from mtpbench.judge.sizing import AL, PositionSize, Sizing
from mtpbench.specs import GateSpec


def _num(p: PositionSize, x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.3f} tok" if p.pos == AL else f"{100 * x:.1f} pts"


def sizing_table(sizes: list[Sizing], gate: GateSpec, prompts: int | None = None) -> Group:
    if not sizes:
        return Group(Text("sizing: the baseline has no per-prompt counts to size from (rates only)", style="yellow"))
    s0 = sizes[0]
    what = (
        f"no drop ≥ {gate.tolerance_al_pct:g} % in acceptance length"
        if gate.primary == "acceptance_length"
        else f"no drop ≥ {gate.tolerance_pts:g} pts per position"
    )
    head = Text(
        f"sizing: to certify {what} ({100 * gate.power:g} % power, {100 * gate.false_alarm:g} % false alarms per "
        f"run over {s0.checks} checks, one-sided α {s0.split.primary:.2g} per primary check, "
        f"{s0.split.diagnosis:.2g} per diagnosis; {100 * gate.confidence:g} % confidence); "
        f"spread from the {s0.source}. Diagnosis rows: the prompts at which that check alone reaches the power",
        style="bold",
    )
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("entry", "prompts", "drafts/prompt", "check", "δ", "se", "detectable", "prompts needed", ""):
        t.add_column(col, justify="left" if col in ("entry", "check", "") else "right")
    have = prompts
    for s in sizes:
        for p in s.positions:
            n = have if have is not None else s.prompts
            ok = p.prompts_needed is not None and n >= p.prompts_needed
            name = ("AL" if p.pos == AL else f"pos{p.pos}") + (" (primary)" if p.primary else " (diagnosis)")
            t.add_row(
                s.entry,
                str(s.prompts),
                f"{s.drafts_per_prompt:.0f}",
                name,
                _num(p, p.drop),
                _num(p, p.se),
                _num(p, p.detectable),
                "–" if p.prompts_needed is None else str(p.prompts_needed),
                Text("enough" if ok else "too few", style="green" if ok else "yellow" if p.primary else "dim"),
            )
    return Group(head, t)
