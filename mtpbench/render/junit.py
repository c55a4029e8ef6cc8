"""JUnit XML of a comparison: one testcase per cell's acceptance length, per cell x position, per cell x
signature and per other finding; a testcase fails exactly when a finding breaks the gate."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from mtpbench.errors import ExitCode, NotComparableError
from mtpbench.judge.compare import Comparison
from mtpbench.judge.findings import Kind, LengthChecks, PositionChecks, Severity, Verdict
from mtpbench.render.words import (
    cause_text,
    check_message,
    finding_line,
    finding_message,
    length_message,
    verdict_text,
)


# Checks whose verdict is a failure of the gate on their own; NO_DATA / NO_BASELINE checks are skipped
# testcases because the cell-level finding (speculation-off, run-failed, no-baseline) carries the failure.
# Which depends on the gate's primary endpoint: its inconclusive fails, the other endpoint's is a diagnosis.
def _fails(primary: bool) -> set[Verdict]:
    return {Verdict.REGRESSION, Verdict.INCONCLUSIVE} if primary else {Verdict.REGRESSION}


# Signatures every cell is tested for, so a pass shows up as a passing testcase.
_CELL_SIGNATURES = (Kind.SPECULATION_OFF, Kind.INSTABILITY, Kind.GRAPH_DIVERGENCE)


def comparison_junit(comp: Comparison) -> str:
    """One testcase per cell × position, per cell × signature, and per other finding. A testcase fails
    exactly when a finding breaks the gate, so `failures > 0` iff the exit code is not 0."""
    suite = ET.Element("testsuite", name=f"mtpbench.{comp.run_id}")
    n = failures = 0
    failing_improvement = {d.cell for d in comp.diagnoses if d.kind == Kind.IMPROVEMENT and d.severity == Severity.FAIL}

    def case(classname: str, name: str) -> ET.Element:
        nonlocal n
        n += 1
        return ET.SubElement(suite, "testcase", classname=f"mtpbench.{classname}", name=name)

    def fail(el: ET.Element, kind: str, message: str, text: str = "") -> None:
        nonlocal failures
        failures += 1
        ET.SubElement(el, "failure", message=message, type=kind).text = text or None

    al_primary = comp.gate.primary == "acceptance_length"
    for y in comp.lengths:
        el = case(y.cell, "acceptance-length")
        desc = length_message(y)
        better = y.verdict == Verdict.IMPROVEMENT and y.cell in failing_improvement
        if y.verdict in _fails(al_primary) or better:
            fail(el, y.verdict.value, desc)
        elif y.verdict == Verdict.NO_DATA:
            ET.SubElement(el, "skipped", message=f"{y.verdict.value}: {desc}")
        else:
            ET.SubElement(el, "system-out").text = f"{y.verdict.value}: {desc}"
    for x in comp.checks:
        el = case(x.cell, f"pos{x.pos}")
        desc = check_message(x)
        better = x.verdict == Verdict.IMPROVEMENT and x.cell in failing_improvement
        if x.verdict in _fails(not al_primary) or better:
            fail(el, x.verdict.value, desc)
        elif x.verdict in (Verdict.NO_DATA, Verdict.NO_BASELINE):
            ET.SubElement(el, "skipped", message=f"{x.verdict.value}: {desc}")
        else:
            ET.SubElement(el, "system-out").text = f"{x.verdict.value}: {desc}"
    covered: set[int] = set()
    for c in comp.cells:
        for kind in _CELL_SIGNATURES:
            el = case(c.cell, kind.value)
            for i, d in enumerate(comp.diagnoses):
                if d.kind == kind and d.cell == c.cell:
                    covered.add(i)
                    if d.severity == Severity.FAIL:
                        fail(el, kind.value, finding_message(d), cause_text(d))
                    else:
                        ET.SubElement(el, "system-out").text = finding_line(d)
    for i, d in enumerate(comp.diagnoses):
        by_checks = d.kind in (Kind.REGRESSION, Kind.IMPROVEMENT, Kind.INCONCLUSIVE) and isinstance(
            d.payload, PositionChecks | LengthChecks
        )
        if i in covered or by_checks:
            continue  # already a testcase: its cell × signature, or its cell × position checks
        el = case(d.cell, d.name)
        if d.severity == Severity.FAIL:
            fail(el, d.name, finding_message(d), cause_text(d))
        else:
            ET.SubElement(el, "system-out").text = finding_line(d)
    el = case("gate", "verdict")
    if comp.exit_code != ExitCode.OK and failures == 0:  # defensive: the file must never read green
        fail(el, "verdict", verdict_text(comp))
    ET.SubElement(el, "system-out").text = verdict_text(comp)
    suite.set("tests", str(n))
    suite.set("failures", str(failures))
    # Jenkins' JUnit schema requires `errors` (tests/data/junit-jenkins.xsd); a gate check never errors.
    suite.set("errors", "0")
    suite.set("skipped", str(len(suite.findall("testcase/skipped"))))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def not_comparable_junit(exc: NotComparableError) -> str:
    suite = ET.Element("testsuite", name=f"mtpbench.{exc.run_id or 'run'}", tests="1", failures="1")
    el = ET.SubElement(suite, "testcase", classname="mtpbench.gate", name="comparable")
    ET.SubElement(el, "failure", message=str(exc), type="not-comparable")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
