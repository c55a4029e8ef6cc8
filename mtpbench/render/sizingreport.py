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


def _check_name(p: PositionSize) -> str:
    if p.context:
        return f"context pos{p.pos} (decay)"
    if p.divergence:
        return f"graph pos{p.pos} (divergence)"
    return ("AL" if p.pos == AL else f"pos{p.pos}") + (" (primary)" if p.primary else " (diagnosis)")


def sizing_table(sizes: list[Sizing], gate: GateSpec, whose: str | None = None) -> Group:
    """`whose`: whose prompts the rows judge, said in the last line ("the config's"); None: each entry's own."""
    if not sizes:
        return Group(Text("sizing: the pilot run has no checks with a spread to size from", style="yellow"))
    s0 = sizes[0]
    what = (
        f"no drop ≥ {gate.tolerance_al_pct:g} % in acceptance length"
        if gate.primary == "acceptance_length"
        else f"no drop ≥ {gate.tolerance_pts:g} pts per position"
    )
    sources = list(dict.fromkeys(s.source for s in sizes))
    floored = any(s.floored for s in sizes)
    context = any(p.context for s in sizes for p in s.positions)
    head = Text(
        f"sizing: to certify {what} ({100 * gate.power:g} % power, {100 * gate.false_alarm:g} % false alarms per "
        f"run over {s0.checks} checks, one-sided α "
        + (f"{s0.split.primary:.2g} per primary check, " if s0.split.primary else "")
        + f"{s0.split.diagnosis:.2g} per diagnosis; {100 * gate.confidence:g} % confidence); "
        f"spread from {'; '.join(sources)}"
        + (", floored by the spread bursty drafts give (benchmarks/gate_power.py's `bursty` level)" if floored else "")
        + ". Diagnosis rows: the prompts at which that check alone reaches the power; graph rows: the prompts at "
        f"which a harmless graph cell stays within {gate.divergence_pts:g} pts of eager"
        + (
            f"; context rows: the prompts per bucket at which a harmless longer bucket stays within "
            f"{gate.divergence_pts:g} pts of the first (context decay pairs one bucket's prompts)"
            if context
            else ""
        ),
        style="bold",
    )
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("entry", "prompts", "drafts/prompt", "check", "δ", "se", "detectable", "prompts needed", ""):
        t.add_column(col, justify="left" if col in ("entry", "check", "") else "right")
    for s in sizes:
        for p in s.positions:
            t.add_row(
                s.entry,
                f"{p.prompts} per bucket" if p.context else str(p.prompts),
                f"{s.drafts_per_prompt:.0f}",
                _check_name(p),
                _num(p, p.drop),
                _num(p, p.se),
                _num(p, p.detectable),
                "–" if p.prompts_needed is None else str(p.prompts_needed),
                Text(
                    "enough" if p.enough else "too few",
                    style="green" if p.enough else "yellow" if p.fails_harmless else "dim",
                ),
            )
    return Group(head, t, Text(needed_line(sizes, whose), style="bold"))


def needed_line(sizes: list[Sizing], whose: str | None = None) -> str:
    """One line: what the run needs (every check that can fail a harmless run, each in the units it pairs:
    prompts, or a context sweep's prompts per bucket) against what it has."""
    rows = [p for s in sizes for p in s.positions if p.fails_harmless]
    if not rows or any(p.prompts_needed is None for p in rows):
        return "prompts needed: unknown (an entry has fewer than two prompts to size from)"
    parts: list[str] = []
    have: list[str] = []
    whole = [p for p in rows if not p.context]
    if whole:
        need = max(p.prompts_needed or 0 for p in whole)
        which = "the primary endpoint" if any(p.primary for p in whole) else ""
        if any(p.divergence for p in whole):
            which = f"{which} and graph divergence" if which else "graph divergence"
        parts.append(f"{need} ({which})")
        have.append(f"{whole[0].prompts} prompts")
    bucket = [p for p in rows if p.context]
    if bucket:
        need = max(p.prompts_needed or 0 for p in bucket)
        parts.append(f"{need} per context bucket (context decay)")
        have.append(f"{bucket[0].prompts} prompts per bucket")
    line = f"prompts needed: {', '.join(parts)}: every check that can fail a harmless run"
    owner = whose or ("its" if len(sizes) == 1 else "each entry's")
    if all(p.enough for p in rows):
        return f"{line}; {owner} {' and '.join(have)} certify δ on a healthy build"
    return (
        f"{line}; {owner} {' and '.join(have)} are too few: a healthy build is expected to be inconclusive "
        "(exit 5) here, while a collapse far beyond δ still fails (exit 1)"
    )
