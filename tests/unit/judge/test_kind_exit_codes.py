"""Every finding kind owns its exit code (issue 27, "fail closed by construction"): `Finding.exit_code` once
read a map beside the enum with `.get(kind, ExitCode.OK)`, so seven kinds were unmapped and a new failing
kind would have passed silently. Now the code is declared with the kind, and a kind without one (or with OK)
cannot be declared at all."""

from __future__ import annotations

import pytest

from mtpbench.errors import ExitCode
from mtpbench.judge.findings import ExitCodedKind, Finding, Kind, Severity

# The codes every kind gave before the codes moved into the enum (the old KIND_EXIT map): unchanged.
WAS_MAPPED = {
    Kind.REGRESSION: ExitCode.REGRESSION,
    Kind.SPECULATION_OFF: ExitCode.REGRESSION,
    Kind.INSTABILITY: ExitCode.REGRESSION,
    Kind.GRAPH_DIVERGENCE: ExitCode.REGRESSION,
    Kind.IMPROVEMENT: ExitCode.REGRESSION,
    Kind.INCONCLUSIVE: ExitCode.INCONCLUSIVE,
    Kind.UNDERPOWERED: ExitCode.INCONCLUSIVE,
    Kind.NO_BASELINE: ExitCode.NOT_COMPARABLE,
    Kind.RUN_FAILED: ExitCode.RUN_FAILED,
    Kind.FAILED_REQUESTS: ExitCode.REGRESSION,
    Kind.THROUGHPUT_DROP: ExitCode.REGRESSION,
    Kind.FIX_NOT_APPLIED: ExitCode.REGRESSION,
    Kind.PATCH_NOT_APPLIED: ExitCode.REGRESSION,
    Kind.SAMPLER_BROKEN: ExitCode.REGRESSION,
    Kind.DRIFT: ExitCode.REGRESSION,
    Kind.STALL: ExitCode.REGRESSION,
    Kind.METADATA_BINDING: ExitCode.REGRESSION,
    Kind.GRAPH_NOT_REPLAYED: ExitCode.REGRESSION,
    Kind.UPSTREAM_RULE: ExitCode.REGRESSION,
    Kind.REQUEST_AL_REGRESSION: ExitCode.REGRESSION,
    Kind.REQUEST_AL_INCONCLUSIVE: ExitCode.INCONCLUSIVE,
}


@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.value)
def test_every_kind_has_a_failing_exit_code(kind: Kind) -> None:
    assert isinstance(kind.exit_code, ExitCode)
    assert kind.exit_code not in (ExitCode.OK, ExitCode.USAGE)
    assert Finding(kind, Severity.FAIL, "c").exit_code == kind.exit_code
    # Only a FAIL decides the exit code: a warning or a note never fails the gate.
    assert Finding(kind, Severity.WARN, "c").exit_code == ExitCode.OK
    assert Finding(kind, Severity.INFO, "c").exit_code == ExitCode.OK


def test_the_kinds_that_had_an_exit_code_keep_it() -> None:
    assert {k: k.exit_code for k in WAS_MAPPED} == WAS_MAPPED


def test_kinds_keep_their_json_names() -> None:
    # The value is the JSON document's `kind`: the code rides beside it, not in it.
    assert Kind.REGRESSION.value == "regression" and Kind("graph-divergence") is Kind.GRAPH_DIVERGENCE
    assert Kind.REGRESSION == "regression"


def test_a_kind_without_an_exit_code_cannot_be_declared() -> None:
    with pytest.raises(TypeError):

        class Unmapped(ExitCodedKind):
            NEW_FAILURE = "new-failure"


def test_a_kind_cannot_declare_exit_zero() -> None:
    for code in (ExitCode.OK, ExitCode.USAGE, 0):
        with pytest.raises(ValueError, match="non-zero"):

            class Passing(ExitCodedKind):
                NEW_FAILURE = "new-failure", code
