"""The verdict in words: the one verdict line every output leads with (console, Markdown, JSON `summary`, JUnit)
and what a pass certifies (the drop ruled out, where, at what confidence). Its code is the Comparison's.
"""

from __future__ import annotations

import shlex

from mtpbench.errors import ExitCode
from mtpbench.judge.compare import Comparison
from mtpbench.judge.findings import Cause, Severity, Verdict
from mtpbench.render.words.units import count
from mtpbench.schema import COUNTERS_ONLY

__all__ = ["EXPECTED_FAIL", "certified_text", "compare_command", "reproduction_note", "verdict_text"]

# The label of a FAIL the selftest injected on purpose: its fault cells must fail for the selftest to pass.
EXPECTED_FAIL = "(expected: the injected fault must fail)"


def reproduction_note(prompts: int) -> str:
    """What a reproduction config's verdict means (specs.ConfigRole): said by its dry-run and its verdict."""
    return (
        f"this config is a reproduction (role: reproduction): it replays a published setup as published, and "
        f"its {prompts} prompts are too few to certify the gate's δ, so a healthy build is expected to be "
        "inconclusive (exit 5) here, not green (`run --dry-run` and `mtpbench size` say how many prompts "
        "certify δ); a collapse far beyond δ (the bug it reproduces) still fails "
        "(exit 1). Gate builds with a config whose prompt set `mtpbench size` sized (role: gate)"
    )


def compare_command(run_path: str | None, baseline: str) -> str:
    """The `compare` command line that judges a run against a baseline, as it runs when pasted."""
    return shlex.join(["mtpbench", "compare", run_path or "RUN", "--baseline", baseline])


def certified_text(comp: Comparison) -> str:
    """What a pass certifies, in words: the drop ruled out, where, and at what confidence over the run."""
    if not comp.checks and not comp.lengths and comp.baseline:
        return "the baseline has no per-position rates: its upstream golden judged the run (upstream-rule)"
    if not comp.checks and not comp.lengths and comp.config_baseline:
        return (
            f"not compared with the baseline the run's config names ({comp.config_baseline}), so no drop is "
            f"ruled out here: `{compare_command(comp.run_path, comp.config_baseline)}` judges the run against it"
        )
    if not comp.checks and not comp.lengths:
        return "no baseline given, so no drop is ruled out"
    conf = f"{100 * comp.gate.confidence:g} % confidence over the run's {comp.primary} primary check(s)"
    pos_ok = [x for x in comp.checks if x.verdict == Verdict.PASS and x.method != COUNTERS_ONLY]
    pos = sorted({x.pos for x in pos_ok})
    where = (
        f"pos{pos[0]}-{pos[-1]}"
        if len(pos) > 1 and pos == list(range(pos[0], pos[-1] + 1))
        else (", ".join(f"pos{p}" for p in pos))
    )
    if comp.gate.primary == "acceptance_length":
        al_ok = [x for x in comp.lengths if x.verdict == Verdict.PASS and x.method != COUNTERS_ONLY]
        if not al_ok:
            return "no drop is ruled out (no check could certify one)"
        left = len(comp.lengths) - len(al_ok)
        base = ", ".join(dict.fromkeys(f"{x.base_al:.2f}" for x in al_ok if x.base_al is not None))
        also = (
            f"; per position, a {comp.gate.tolerance_pts:g}-pt drop is also ruled out at {where} in "
            f"{len(pos_ok)} of {len(comp.checks)} checks"
            if pos_ok
            else "; no position could rule out a drop of its own"
        )
        note = f"; {left} cell(s) not certified" if left else ""
        return (
            f"no drop ≥ {comp.gate.tolerance_al_pct:g} % in acceptance length (baseline {base} tokens/step) in "
            f"{len(al_ok)} cell(s), {conf}{note}{also}"
        )
    if not pos_ok:
        return "no drop is ruled out (no check could certify one)"
    cells = len({x.cell for x in pos_ok})
    left = len(comp.checks) - len(pos_ok)
    note = f"; {left} check(s) not certified" if left else ""
    return f"no drop ≥ {comp.gate.tolerance_pts:g} pts at {where} in {cells} cell(s), {conf}{note}"


def verdict_text(comp: Comparison) -> str:
    code = comp.exit_code
    fails = [d for d in comp.diagnoses if d.exit_code == code and d.severity == Severity.FAIL]
    ncells = len({d.cell for d in fails})
    kinds = ", ".join(sorted({d.name for d in fails}))
    if code == ExitCode.OK:
        warns = sum(1 for d in comp.diagnoses if d.severity == Severity.WARN)
        tail = f", {warns} warning(s)" if warns else ""
        cells = count(len(comp.cells), "cell")
        return f"PASS: {cells}, {certified_text(comp)}; no regression or bug signature{tail} (exit 0)"
    if code == ExitCode.REGRESSION:
        return f"FAIL: {kinds} in {ncells} cell(s) (exit 1)"
    if code == ExitCode.NOT_COMPARABLE:
        return f"NOT COMPARABLE: {ncells} cell(s) have no baseline entry to judge them by (exit 4)"
    if code == ExitCode.INCONCLUSIVE:
        line = f"INCONCLUSIVE: {kinds} in {ncells} cell(s); the data can neither confirm nor rule out a drop (exit 5)"
        if comp.role == "reproduction":
            prompts = max((c.prompts_expected for c in comp.cells), default=0)
            line += f"; {reproduction_note(prompts)}"
        return line
    failed = [d for d in comp.diagnoses if d.exit_code == ExitCode.RUN_FAILED]
    if failed and all(d.cause == Cause.RECORDS_SHORT for d in failed):
        return (
            "INCOMPLETE: the records file holds fewer prompts than the manifest says the repeats finished; those "
            "repeats were left out of the verdicts (exit 3)"
        )
    return "INCOMPLETE: some repeats did not finish and were left out of the verdicts (exit 3)"
