"""The context sweep's judgement (issue 31 part 3, judge/signals/context.py): a cell whose prompts ran behind shared
contexts of growing length (`<id>@ctx<tokens>`) is split per bucket; a longer bucket whose acceptance falls
below the first's beyond the gate's tolerance, paired by prompt, is `context-decay` (exit 1, or a warning under
workload.context.on_decay: warn); a fall the data cannot support is inconclusive; a flat or rising trend is
no finding; the per-bucket acceptance is in compare/show's table, the JSON, the Markdown and the HTML report.
Constructed runs written by the store's RunWriter, as tests/support/synthetic_runs.py writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mtpbench.errors import ExitCode
from mtpbench.judge.compare import Comparison, judge
from mtpbench.judge.findings import Kind, Severity
from mtpbench.render.report import comparison_document, comparison_markdown
from mtpbench.render.words import finding_message
from mtpbench.schema import CellStatus
from mtpbench.store.results import load_run
from mtpbench.store.writer import RunWriter

K = 3
BUCKETS = [0, 256, 512]
CELL = "cpu/eager/stock"


def prompt_counts(rates_pct: list[float], drafts: int) -> dict[str, Any]:
    per_pos = [round(r / 100 * drafts) for r in rates_pct]
    return {
        "num_drafts": drafts,
        "num_draft_tokens": drafts * K,
        "num_accepted_tokens": sum(per_pos),
        "accepted_per_pos": per_pos,
    }


def write_sweep(
    root: Path, rates: dict[int, list[list[float]]], *, on_decay: str | None = None, temperature: float = 0.0
) -> Path:
    """One eager cell, one repeat: rates[tokens][prompt] = per-position rates (%) of that prompt behind that
    many context tokens; prompt ids are the sweep's (`p<i>@ctx<tokens>`)."""
    context: dict[str, Any] = {"fractions": [0.0, 0.25, 0.5], "source": "ctx.yaml"}
    if on_decay is not None:
        context["on_decay"] = on_decay
    config = {
        "name": "context",
        "model": "m",
        "speculative": {"method": "mtp", "model": "d", "num_speculative_tokens": K, "extra": {}},
        "sampling": {"temperature": temperature, "max_tokens": 96},
        "modes": {"eager": {"enforce_eager": True}},
        "gate": {},
        "baseline": None,
        "workload": {"kind": "offline", "context": context},
    }
    ids = [f"p{i}@ctx{t}" for t, per_prompt in rates.items() for i in range(len(per_prompt))]
    run = RunWriter.create(
        root, config=config, config_path="context.yaml", prompts={"name": "p", "sha256": "ab" * 32, "ids": ids}
    )
    run.manifest["model"] = {"name": "m", "config_sha256": "cd" * 32, "weights_sha256": "c0" * 32}
    run.manifest["drafter"] = {"name": "d", "config_sha256": "ef" * 32, "weights_sha256": "e0" * 32}
    i = run.add_cell(build="cpu", mode="eager", variant="stock", repeat=0, hash_seed=0, status=CellStatus.OK)
    records = [run.record(i, "cell_start", requested={"enforce_eager": True}, effective={"cudagraph_mode": "NONE"})]
    for j, pid in enumerate(ids):
        base, tokens = pid.split("@ctx")
        records.append(
            run.record(
                i,
                "prompt",
                prompt_id=pid,
                prompt_index=j,
                context_tokens=int(tokens),
                **prompt_counts(rates[int(tokens)][int(base[1:])], 100),
                num_generated_tokens=96,
                output_sha256=f"same-{base}",
                wall_s=0.1,
            )
        )
    run.save()
    run.append(records)
    return run.path


def spread(center: list[float], n: int, jitter: float = 2.0) -> list[list[float]]:
    """n prompts around `center`, each position moved by a prompt-dependent amount (prompt-level noise)."""
    return [[min(100.0, c + jitter * ((p % 5) - 2)) for c in center] for p in range(n)]


GOOD = [97.0, 91.0, 88.0]
FALLEN = [96.0, 85.0, 70.0]  # pos2 -18 pts behind the longest context


def judged(tmp_path: Path, rates: dict[int, list[list[float]]], **kw: Any) -> Comparison:
    return judge(load_run(write_sweep(tmp_path / "run", rates, **kw)))


def decays(comp: Comparison) -> list[Any]:
    return [d for d in comp.diagnoses if d.kind == Kind.CONTEXT_DECAY]


def test_acceptance_that_falls_with_context_beyond_the_tolerance_is_context_decay_exit_1(tmp_path: Path) -> None:
    comp = judged(tmp_path, {0: spread(GOOD, 20), 256: spread(GOOD, 20), 512: spread(FALLEN, 20)})
    found = decays(comp)
    assert len(found) == 1 and found[0].severity == Severity.FAIL and found[0].cell == CELL
    n = found[0].numbers
    assert (n["pos"], n["tokens"], n["reference_tokens"], n["prompts"]) == (2, 512, 0, 20)
    assert n["delta"] == pytest.approx(-0.18, abs=1e-6)
    assert [b["tokens"] for b in n["buckets"]] == BUCKETS
    text = finding_message(found[0])
    assert "pos2 70.0 % behind 512 tokens vs 88.0 % in the 0-token bucket" in text and "-18.0 pts" in text
    assert "0 → 256 → 512 tokens" in text
    assert comp.exit_code == ExitCode.REGRESSION


def test_context_decay_under_on_decay_warn_is_a_warning_that_passes(tmp_path: Path) -> None:
    comp = judged(tmp_path, {0: spread(GOOD, 20), 256: spread(GOOD, 20), 512: spread(FALLEN, 20)}, on_decay="warn")
    found = decays(comp)
    assert len(found) == 1 and found[0].severity == Severity.WARN
    assert comp.exit_code == ExitCode.OK


def test_flat_or_rising_acceptance_with_context_is_no_finding(tmp_path: Path) -> None:
    rising = [99.0, 95.0, 93.0]
    comp = judged(tmp_path, {0: spread(GOOD, 20), 256: spread(GOOD, 20), 512: spread(rising, 20)})
    assert not decays(comp)
    assert not [d for d in comp.diagnoses if d.kind == Kind.INCONCLUSIVE]
    assert comp.exit_code == ExitCode.OK
    # The rise is judged (the buckets were read), not missed: the longest bucket accepts more than the first.
    (table,) = comp.context
    assert table.buckets[-1].per_pos[2] > table.buckets[0].per_pos[2]  # type: ignore[operator]


def test_a_fall_beyond_the_tolerance_on_too_few_noisy_prompts_is_inconclusive(tmp_path: Path) -> None:
    # Three prompts, one of which alone carries the fall: beyond δ, but the paired interval spans zero.
    noisy = {0: [GOOD, GOOD, GOOD], 256: [GOOD, GOOD, GOOD], 512: [GOOD, GOOD, [90.0, 60.0, 30.0]]}
    comp = judged(tmp_path, noisy)
    assert not decays(comp)
    inc = [d for d in comp.diagnoses if d.kind == Kind.INCONCLUSIVE and d.numbers.get("check") == "context-decay"]
    assert len(inc) == 1 and inc[0].numbers["tokens"] == 512
    assert "but the data cannot support it" in finding_message(inc[0])
    assert comp.exit_code == ExitCode.INCONCLUSIVE


def test_an_inconclusive_context_fall_is_worded_inconclusive_below_the_first_bucket(tmp_path: Path) -> None:
    # Issue 37 item 13: it read "FAIL inconclusive … -9.3 pts below 0" (exit 5; 0 meant the 0-token bucket).
    from mtpbench.render.report import diagnosis_text
    from mtpbench.render.words import finding_line

    noisy = {0: [GOOD, GOOD, GOOD], 256: [GOOD, GOOD, GOOD], 512: [GOOD, GOOD, [90.0, 60.0, 30.0]]}
    comp = judged(tmp_path, noisy)
    (inc,) = [d for d in comp.diagnoses if d.kind == Kind.INCONCLUSIVE]
    text = finding_message(inc)
    assert "pts below the 0-token bucket" in text and "below 0," not in text and "is -" not in text
    for line in (diagnosis_text(inc).plain, finding_line(inc), comparison_markdown(comp)):
        assert "FAIL" not in line and "INCONCLUSIVE" in line


def test_per_bucket_acceptance_is_in_the_comparison_json_and_markdown(tmp_path: Path) -> None:
    comp = judged(tmp_path, {0: spread(GOOD, 5, 0.0), 256: spread(GOOD, 5, 0.0), 512: spread(FALLEN, 5, 0.0)})
    assert len(comp.context) == 1 and comp.context[0].cell == CELL
    buckets = comp.context[0].buckets
    assert [b.tokens for b in buckets] == BUCKETS and [b.prompts for b in buckets] == [5, 5, 5]
    assert buckets[2].per_pos == pytest.approx([0.96, 0.85, 0.70])
    assert buckets[0].acceptance_length == pytest.approx(1 + (0.97 + 0.91 + 0.88))
    doc = comparison_document(comp)
    assert [b["tokens"] for b in doc["context"][0]["buckets"]] == BUCKETS
    md = comparison_markdown(comp)
    assert "Acceptance per context bucket" in md
    assert "| `cpu/eager/stock` | 512 | 5 | 96.0 / 85.0 / 70.0 |" in md


def test_a_run_that_is_no_context_sweep_has_no_bucket_table(make_run: Any) -> None:
    comp = judge(load_run(make_run({CELL: [GOOD]}, baseline=None)))
    assert comp.context == [] and "context" not in comparison_document(comp)
    assert not decays(comp)


def test_the_html_report_has_the_bucket_table_and_the_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from mtpbench.render.htmlreport import write_report

    path = write_sweep(tmp_path / "run", {0: spread(GOOD, 5), 256: spread(GOOD, 5), 512: spread(FALLEN, 5)})
    run = load_run(path)
    comp = judge(run)
    html = tmp_path / "report.html"
    write_report(run, comp, html, None)
    page = html.read_text()
    assert '<section id="context">' in page and '<figure id="fig-context"><svg' in page
    assert "<td>512</td>" in page and "Acceptance by context length" in page
