"""`mtpbench reference RUN`: the acceptance a greedy run should report, recomputed from the weights
(mtpbench/reference/), stored beside the run (runs/<id>/reference.jsonl) and held against the engine's counts
(judge/signals/reference_comparison.py) with the run's own gate settings. No baseline is involved: exit 1 when the
engine accepts significantly less than its weights say (`engine-below-reference`) or when its prompts stop counting
exactly what the weights say where a cell of the reference build counts every prompt exactly (`exactness-lost`), 0
otherwise (warnings shown), 2 for a run or a pair the reference does not model.

The replay needs torch and transformers (they come with vllm); they are imported only once the options and
the run have been checked, so a bad invocation fails in a second.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mtpbench.cli.common import console, err_console
from mtpbench.errors import UserError

if TYPE_CHECKING:
    from mtpbench.reference.compute import ReferenceOptions
    from mtpbench.store.reference_records import ReferenceFile
    from mtpbench.store.results import Run

__all__ = ["reference_cmd"]


def reference_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder (runs/<id>).")],
    device: Annotated[str, typer.Option(help="torch device of the replay: cpu, cuda, cuda:1, npu, …")] = "cpu",
    threads: Annotated[int | None, typer.Option(min=1, help="CPU threads of the replay (default: torch's).")] = None,
    batch: Annotated[int, typer.Option(min=1, help="Prompts regenerated at once.")] = 32,
    target: Annotated[Path | None, typer.Option(help="The target's folder, if not the run's model path here.")] = None,
    drafter: Annotated[Path | None, typer.Option(help="The drafter's folder, if not the run's path here.")] = None,
    stored: Annotated[
        bool, typer.Option("--stored", help="Judge the run's stored reference instead of replaying it again.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
) -> int:
    """Recompute from the weights the acceptance a greedy run should report, and hold the engine's counts
    against it: exit 1 when the engine accepts significantly less than its weights say (no baseline needed)."""
    from mtpbench.judge.evidence import collect_evidence
    from mtpbench.judge.signals.reference_comparison import hold_run
    from mtpbench.reference.compute import ReferenceOptions, check_replay, check_run
    from mtpbench.reference.pair import check_pair
    from mtpbench.render.referencereport import finding_lines, reference_document, reference_table, summary_line
    from mtpbench.store.reference_records import read_reference
    from mtpbench.store.results import load_run

    run = load_run(run_dir)
    check_run(run)
    if stored:
        ref = read_reference(run.path)
        if ref is None:
            raise UserError(f"{run.path}: no finished reference stored; run `mtpbench reference {run_dir}` first")
    else:
        raw = run.manifest.get("config") or {}
        # The pair is checked before torch is imported: an architecture it does not model is one line, at once.
        spec = raw.get("speculative") or {}
        check_pair(target or raw.get("model") or "", drafter or spec.get("model"), str(spec.get("method") or ""))
        check_replay(run)
        options = ReferenceOptions(
            device=device,
            threads=threads,
            batch=batch,
            target=None if target is None else str(target),
            drafter=None if drafter is None else str(drafter),
        )
        ref = _replay(run, options)
    gate = run.typed.config.gate
    # The one holding every judging command makes of a stored reference (judge/signals/reference_comparison.py
    # hold_run).
    cmp = hold_run(collect_evidence(run, gate.confidence), ref, gate)
    if as_json:
        sys.stdout.write(json.dumps(reference_document(cmp), indent=2) + "\n")
    else:
        console.print(reference_table(cmp))
        for line in finding_lines(cmp):
            console.print(line, markup=False, highlight=False)
        console.print(summary_line(cmp), markup=False, highlight=False)
    return int(cmp.exit_code)


def _replay(run: Run, options: ReferenceOptions) -> ReferenceFile:
    """The replay with its progress bar on stderr (stdout stays the verdict's, --json included)."""
    from mtpbench.cli.progress import replay_bar
    from mtpbench.reference.compute import compute_reference

    with replay_bar(err_console) as progress:
        return compute_reference(run, options, progress)
