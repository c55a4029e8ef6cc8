"""`calibrate` (what an upstream project's acceptance gate costs at its own sample size, on a stored run's
per-prompt spread, and `--emit`: the entry its file takes at a calibrated threshold) and `baseline import-upstream`
(an upstream shape read as a baseline). Thin: options are checked here, judge/calibrate.py computes,
render/calibration.py writes, store/upstream_shapes.py reads."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mtpbench.cli.common import console, make_parent
from mtpbench.errors import UserError

if TYPE_CHECKING:
    from mtpbench.judge.noise import Truth

__all__ = ["calibrate_cmd", "import_upstream"]

SPREADS = ("stored", "gemma4-like")


def _stored_truth(path: Path, entry: str | None, variant: str) -> tuple[Truth, str, int | None]:
    """The per-prompt counts of a baseline file or a run folder (its baseline, as `baseline save` makes it)."""
    import numpy as np

    from mtpbench.judge.calibrate import truth_of_counts
    from mtpbench.store.baseline import load_baseline

    if path.is_dir():
        from mtpbench.judge.save import baseline_of_run
        from mtpbench.store.results import load_run

        b = baseline_of_run(load_run(path), path.name, variant)
    else:
        b = load_baseline(path)
    have = [e for e in b.entries if e.prompts]
    chosen = [e for e in have if entry is None or f"{e.build}/{e.mode}" == entry]
    if not chosen:
        names = ", ".join(f"{e.build}/{e.mode}" for e in have) or "none"
        raise UserError(f"{path}: no entry {entry or ''} with per-prompt counts (entries with them: {names})")
    e = chosen[0]
    assert e.prompts is not None  # chosen for its per-prompt counts
    ids = list(e.prompts)
    drafts = np.array([e.prompts[p].num_drafts for p in ids], dtype=float)
    accepted = np.array([e.prompts[p].accepted_per_pos for p in ids], dtype=float).reshape(len(ids), -1)
    cap = b.fingerprint.sampling.get("max_tokens")
    spread = f"{path.name} {e.build}/{e.mode}"
    return truth_of_counts(spread, ids, drafts, accepted), spread, int(cap) if cap else None


def calibrate_cmd(
    source: Annotated[
        Path | None,
        typer.Argument(metavar="RUN_OR_BASELINE", help="A run folder or a baseline with per-prompt counts."),
    ] = None,
    rule: Annotated[
        list[str] | None,
        typer.Option(help="An upstream rule (repeatable; 'all' for every one); see docs/calibration.md."),
    ] = None,
    spread: Annotated[
        str, typer.Option(help="Per-prompt spread: 'stored' (the RUN_OR_BASELINE's) or 'gemma4-like'.")
    ] = "stored",
    entry: Annotated[str | None, typer.Option(help="The entry (build/mode) to read; default the first.")] = None,
    variant: Annotated[str, typer.Option(help="A run folder's variant whose cells are read.")] = "stock",
    tolerance: Annotated[
        float | None, typer.Option(help="The rule's tolerance instead of its file's (rtol, 1 - floor, margin).")
    ] = None,
    reps: Annotated[int, typer.Option(help="Bursty draws per scenario.", min=20, max=100_000)] = 200,
    seed: Annotated[int, typer.Option(help="The draws' seed (the same seed, the same answer).", min=0)] = 39,
    emit: Annotated[
        str | None, typer.Option(help="Write the entry this upstream shape takes, at the calibrated threshold.")
    ] = None,
    key: Annotated[str, typer.Option(help="The entry's name in the emitted shape.")] = "mtpbench",
    out: Annotated[Path | None, typer.Option(help="Write the emitted entry here instead of stdout.")] = None,
) -> int:
    """What an upstream acceptance gate costs at its own sample size: false-alarm rate, power at a 5 % AL drop
    and at the seed's collapse, smallest drop caught 90 %; greedy and bursty (exit 0; 2 on bad input)."""
    from mtpbench.judge.calibrate import RULES, calibrate, gemma_like
    from mtpbench.render.calibration import calibration_table
    from mtpbench.render.calibration import emit as emit_shape
    from mtpbench.store.upstream_shapes import SHAPES

    names = list(RULES) if rule in (None, []) or "all" in (rule or []) else list(dict.fromkeys(rule or []))
    bad = [n for n in names if n not in RULES]
    if bad:
        raise UserError(f"--rule: unknown rule {bad[0]!r} (one of {', '.join(RULES)}, or all)")
    if spread not in SPREADS:
        raise UserError(f"--spread: {spread!r} is not one of {', '.join(SPREADS)}")
    if tolerance is not None and not 0 < tolerance < 1:
        raise UserError(f"--tolerance: {tolerance} is not in (0, 1)")
    if emit is not None:
        if emit not in SHAPES:
            raise UserError(f"--emit: unknown shape {emit!r} (one of {', '.join(SHAPES)})")
        want = [emit] if emit != "inferencex" else [n for n in names if RULES[n].statistic == "pooled"][:1]
        if len(names) != 1 or names != want:
            raise UserError(f"--emit {emit}: calibrate one rule, --rule {want[0] if want else emit}")
    if spread == "stored":
        if source is None:
            raise UserError("RUN_OR_BASELINE: give a run folder or a baseline (or --spread gemma4-like)")
        truth, spread_name, cap = _stored_truth(source, entry, variant)
    else:
        truth, spread_name, cap = gemma_like(), "gemma4-like", None
    cals = [calibrate(RULES[n], truth, spread_name, cap, reps, seed, tolerance) for n in names]
    if emit is None:
        console.print(calibration_table(cals), markup=False, highlight=False, soft_wrap=True)
        return 0
    text = emit_shape(cals[0], emit, key) + "\n"
    if out is None:
        console.print(text, markup=False, highlight=False, soft_wrap=True, end="")
        return 0
    make_parent(out, "--out")
    out.write_text(text, encoding="utf-8")
    console.print(f"wrote {out}", markup=False, highlight=False)
    return 0


def import_upstream(
    shape: Annotated[str, typer.Argument(help="The upstream shape (calibrate --emit's names).")],
    file: Annotated[Path, typer.Argument(help="The upstream file, or the entry cut from it.")],
    out: Annotated[Path, typer.Option(help="Baseline file to write.")],
    commit: Annotated[str, typer.Option(help="The upstream commit the file was read at (hex).")],
    key: Annotated[str | None, typer.Option(help="The entry to read where the file holds several.")] = None,
    k: Annotated[int | None, typer.Option(help="Draft length, for a golden that is an AL alone.", min=1)] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> int:
    """Write a baseline whose upstream golden and rule are the ones an upstream file commits (exit 0; 2 on bad
    input)."""
    from mtpbench.store.baseline import write_baseline
    from mtpbench.store.upstream_shapes import baseline_of_shape

    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{file}: cannot read: {exc.strerror or exc}") from None
    date = datetime.now(UTC).date().isoformat()
    b = baseline_of_shape(shape, text, out.stem, commit, date, key, k)
    make_parent(out, "--out")
    write_baseline(b, out, force)
    console.print(f"wrote {out} (upstream {shape}: {b.upstream.source.test if b.upstream else ''})", markup=False)
    return 0
