"""`mtpbench baseline save`: a complete run's evidence as a baseline.

The counts are the evidence stage's (evidence.py: complete repeats, identical greedy repeats once), the same
numbers `show` and `compare` print for the run; a serving run adds its load and what it achieved
(serving_summary.baseline_fields). baseline.py only builds and writes the file: it reads no evidence.
"""

from __future__ import annotations

from typing import Any

from mtpbench.errors import UserError
from mtpbench.judge.evidence import CellResult, collect_evidence
from mtpbench.judge.signals.serving_summary import baseline_fields, is_serving, summarize_serving
from mtpbench.judge.stats import Counts
from mtpbench.store.baseline import Baseline, baseline_from_cells
from mtpbench.store.results import Run


def counts_record(c: Counts) -> dict[str, Any]:
    return {
        "num_drafts": int(c.num_drafts),
        "num_draft_tokens": int(c.num_draft_tokens),
        "num_accepted_tokens": int(c.num_accepted_tokens),
        "accepted_per_pos": [int(x) for x in c.accepted_per_pos],
    }


def per_prompt_records(cell: CellResult) -> dict[str, dict[str, Any]]:
    ev = cell.evidence
    return {
        pid: {
            "num_drafts": int(ev.drafts[i]),
            "num_draft_tokens": int(ev.draft_tokens[i]),
            "num_accepted_tokens": int(ev.accepted[i]),
            "accepted_per_pos": [int(x) for x in ev.per_pos[i]],
        }
        for i, pid in enumerate(ev.ids)
    }


def baseline_of_run(run: Run, name: str, variant: str = "stock") -> Baseline:
    """The baseline of the run's cells of `variant`; refuses (UserError) a run with a cell that did not finish."""
    evidence = collect_evidence(run)
    # A k sweep's cells of the variant are `variant@k<k>`, one entry per k (run/cells.py).
    cells = [c for c in evidence.cells if c.variant in (variant, f"{variant}@k{c.k}")]
    if not cells:
        raise UserError(f"{run.path}: no cells of variant {variant!r}")
    if any(not c.complete for c in cells):
        raise UserError(f"{run.path}: some cells did not finish; a baseline must come from a complete run")
    off = [c.cell for c in cells if c.summary.counts.num_drafts <= 0]
    if off:
        # A baseline that records "no speculation" would call every build that lost its drafter a pass.
        raise UserError(
            f"{run.path}: {', '.join(off)} recorded zero drafts: speculative decoding did not run, "
            "so there is no acceptance to keep as a baseline"
        )
    per_cell = [
        (c.build, c.mode, counts_record(c.summary.counts), len(c.repeats), per_prompt_records(c)) for c in cells
    ]
    served = summarize_serving(run, evidence=evidence) if is_serving(run) else []
    serving = {(c.build, c.mode): baseline_fields(run, c.build, c.mode, variant, served) for c in cells}
    ks = [c.k for c in cells] if run.typed.sweep else None
    return baseline_from_cells(run, name, per_cell, variant=variant, serving=serving, ks=ks)
