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
    if p.divergence:
        return f"graph pos{p.pos} (divergence)"
    return ("AL" if p.pos == AL else f"pos{p.pos}") + (" (primary)" if p.primary else " (diagnosis)")


def sizing_table(sizes: list[Sizing], gate: GateSpec, prompts: int | None = None) -> Group:
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
    head = Text(
        f"sizing: to certify {what} ({100 * gate.power:g} % power, {100 * gate.false_alarm:g} % false alarms per "
        f"run over {s0.checks} checks, one-sided α {s0.split.primary:.2g} per primary check, "
        f"{s0.split.diagnosis:.2g} per diagnosis; {100 * gate.confidence:g} % confidence); "
        f"spread from {'; '.join(sources)}"
        + (", floored by the spread bursty drafts give (benchmarks/gate_power.py's `bursty` level)" if floored else "")
        + ". Diagnosis rows: the prompts at which that check alone reaches the power; graph rows: the prompts at "
        f"which a harmless graph cell stays within {gate.divergence_pts:g} pts of eager",
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
            t.add_row(
                s.entry,
                str(s.prompts),
                f"{s.drafts_per_prompt:.0f}",
                _check_name(p),
                _num(p, p.drop),
                _num(p, p.se),
                _num(p, p.detectable),
                "–" if p.prompts_needed is None else str(p.prompts_needed),
                Text(
                    "enough" if ok else "too few",
                    style="green" if ok else "yellow" if p.fails_harmless else "dim",
                ),
            )
    return Group(head, t, Text(needed_line(sizes, prompts), style="bold"))


def needed_line(sizes: list[Sizing], prompts: int | None = None) -> str:
    """One line: the prompts the run needs (every check that can fail a harmless run) against what it has."""
    needs = [s.prompts_needed for s in sizes]
    if not needs or any(n is None for n in needs):
        return "prompts needed: unknown (an entry has fewer than two prompts to size from)"
    need = max(n for n in needs if n is not None)
    which = "the primary endpoint" + (" and graph divergence" if any(p.divergence for p in sizes[0].positions) else "")
    line = f"prompts needed: {need} ({which}: every check that can fail a harmless run)"
    if prompts is None:
        return line
    if prompts >= need:
        return f"{line}; the config's {prompts} prompts certify δ on a healthy build"
    return (
        f"{line}; the config's {prompts} prompts are too few: a healthy build is expected to be inconclusive "
        "(exit 5) here, while a collapse far beyond δ still fails (exit 1)"
    )
