"""Issue 18: every consumer of a run's evidence reports the same numbers, because they all read the one
evidence stage (mtpbench/judge/evidence.py). Fed the frozen runs (offline selftest, a stock/fault pair, counters-
only serving, nightlies), a per-request serving run, a resumed run and a batched run whose records are in
another order than the config's prompts: `show`/`compare` (evidence.collect), `history` (history.point), the
report's heat map (views.heatmap), the serving table (serving_summary) and `baseline save` (save) must give
one answer per cell. Before the stage, history summed identical greedy repeats (4,041 drafts where show said
1,347) and the heat map put another prompt's name on 37 of 40 rows of a batched run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mtpbench.judge import history
from mtpbench.judge.compare import judge
from mtpbench.judge.evidence import CellResult, changed_text, collect
from mtpbench.judge.findings import Kind
from mtpbench.judge.save import baseline_of_run
from mtpbench.judge.signals import serving_summary
from mtpbench.judge.views import heatmap
from mtpbench.store.manifest import MANIFEST
from mtpbench.store.records import RECORDS
from mtpbench.store.results import Run, load_run
from tests.support.serving_runs import GOOD, write_serving_run

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
FROZEN = sorted(
    p.parent.name if p.parent.parent.name != "nightly" else f"nightly/{p.parent.name}"
    for p in DATA.glob("**/manifest.json")
)


def _copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(DATA / name, dst, ignore=shutil.ignore_patterns("*.parquet", "history-point.json"))
    return dst


def _rewrite(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    lines = [json.loads(x) for x in (path / RECORDS).read_text(encoding="utf-8").splitlines() if x.strip()]
    (path / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in edit(lines)), encoding="utf-8")


def _batched_order(tmp_path: Path) -> Path:
    """The stock/fault pair with each repeat's prompt records in reverse (a batch finishes in its own order)."""
    path = _copy("tiny-stock-fault", tmp_path)

    def reverse(recs: list[dict]) -> list[dict]:  # type: ignore[type-arg]
        out: list[dict] = []  # type: ignore[type-arg]
        block: list[dict] = []  # type: ignore[type-arg]
        for r in recs:
            if r.get("type") == "prompt":
                block.append(r)
                continue
            out += [*block[::-1], r]
            block = []
        return out + block[::-1]

    _rewrite(path, reverse)
    return path


def _resumed(tmp_path: Path) -> Path:
    """The stock/fault pair where repeat 0 of the fault cell was re-run as attempt 2: attempt 1 left other
    counts behind, which must count nowhere."""
    path = _copy("tiny-stock-fault", tmp_path)
    manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    (cell,) = {c["cell"] for c in manifest["cells"] if c["cell"].endswith("/fault")}
    for c in manifest["cells"]:
        if c["cell"] == cell and c["repeat"] == 0:
            c["attempt"] = 2
    (path / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")

    def resume(recs: list[dict]) -> list[dict]:  # type: ignore[type-arg]
        stale = [
            {**r, "attempt": 1, "num_drafts": r["num_drafts"] + 7, "num_draft_tokens": r["num_draft_tokens"] + 21}
            for r in recs
            if r.get("cell") == cell and r.get("repeat") == 0 and r.get("type") == "prompt"
        ]
        current = [{**r, "attempt": 2} if r.get("cell") == cell and r.get("repeat") == 0 else r for r in recs]
        return stale + current

    _rewrite(path, resume)
    return path


def _serving(tmp_path: Path) -> Path:
    return write_serving_run(tmp_path, {"cpu/eager/stock": GOOD, "cpu/eager/fault": GOOD[::-1][:3]})


RUNS = [*FROZEN, "batched-order", "resumed", "serving-per-request"]


@pytest.fixture(params=RUNS)
def run(request: pytest.FixtureRequest, tmp_path: Path) -> Run:
    name = request.param
    made = {"batched-order": _batched_order, "resumed": _resumed, "serving-per-request": _serving}
    return load_run(made[name](tmp_path) if name in made else _copy(name, tmp_path))


def _counts(c: CellResult) -> tuple[int, list[int]]:
    t = c.summary.counts
    return int(t.num_drafts), [int(x) for x in t.accepted_per_pos]


def test_history_counts_are_shows(run: Run) -> None:
    cells = collect(run)
    pt = history.point(run)
    for c in cells:
        if c.evidence.g:
            assert pt.counts[c.cell] == _counts(c), c.cell
            drafts, accepted = pt.units[c.cell]
            assert int(drafts.sum()) == _counts(c)[0] and accepted.sum(axis=0).tolist() == _counts(c)[1]
        else:
            assert c.cell not in pt.counts
    assert pt.incomplete == {c.cell for c in cells if not c.complete}


def test_heatmap_rows_are_the_evidence_of_the_prompt_they_name(run: Run) -> None:
    cells = collect(run)
    k = max((c.evidence.k for c in cells), default=3)
    hm = heatmap(run, cells, k, max_rows=10**6)  # one row per prompt
    frame = hm.frame.set_index(["cell", "row"])
    for c in cells:
        ev = c.evidence
        for i, pid in enumerate(ev.ids):
            row = frame.loc[(c.cell, pid)]
            assert int(row["drafts"]) == int(ev.drafts[i]), (c.cell, pid)
            for p in range(k):
                want = ev.per_pos[i, p] / ev.drafts[i] if ev.drafts[i] else np.nan
                assert row[f"pos{p}"] == pytest.approx(want, nan_ok=True), (c.cell, pid, p)
        got = hm.frame[hm.frame["cell"] == c.cell]
        assert int(got["drafts"].sum()) == _counts(c)[0]


def test_text_changes_are_one_rule(run: Run) -> None:
    comp = judge(run)
    pairs = changed_text(comp.cells)
    said = {p for d in comp.diagnoses if d.kind == Kind.TEXT_CHANGED for p in d.numbers["prompts"]}
    assert said == {p for _, p in pairs}


def test_serving_table_is_the_offline_table(run: Run) -> None:
    if not serving_summary.is_serving(run):
        pytest.skip("an offline run has no serving table")
    cells = {c.cell: c for c in collect(run)}
    for s in serving_summary.summarize_serving(run):
        c = cells[s.cell]
        assert s.pooled_per_pos == list(c.summary.per_pos)
        if not s.acceptance == serving_summary.COUNTERS_ONLY:
            assert s.pooled_per_pos_ci == list(c.summary.per_pos_ci)
        assert s.pooled_al == c.summary.acceptance_length


def test_baseline_save_stores_shows_counts(run: Run) -> None:
    cells = [c for c in collect(run) if c.variant == "stock"]
    if not cells or not all(c.complete for c in cells) or not any(_counts(c)[0] for c in cells):
        pytest.skip("no complete stock cell with drafts to save")
    b = baseline_of_run(run, "b")
    for c in cells:
        e = b.entry_for(c.build, c.mode)
        assert e is not None and e.counts is not None
        assert (e.counts.num_drafts, list(e.counts.accepted_per_pos)) == _counts(c)


def test_the_batched_order_differs_from_the_configs(tmp_path: Path) -> None:
    # The fixture above is only a test of the heat map's labels if the record order really differs.
    run = load_run(_batched_order(tmp_path))
    recorded = list(dict.fromkeys(run.prompt_frame()["prompt_id"]))
    assert recorded != run.manifest["prompts"]["ids"] and sorted(recorded) == sorted(run.manifest["prompts"]["ids"])


def test_a_resumed_runs_stale_attempt_counts_nowhere(tmp_path: Path) -> None:
    fresh = collect(load_run(_copy("tiny-stock-fault", tmp_path / "a")))
    resumed = collect(load_run(_resumed(tmp_path / "b")))
    assert [_counts(c) for c in fresh] == [_counts(c) for c in resumed]
