"""The verdict where people look (issue 37 items 9-14): a run of several builds says how its builds compared
(build-divergence or its absence, and the builds × positions table) in the console, Markdown and JSON, not
only in the HTML page; the compare command `show` suggests runs when pasted; an inconclusive finding is
printed INCONCLUSIVE, not "FAIL inconclusive". Synthetic runs (tests/conftest.py write_run)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

from tests.support.cli import invoke
from tests.support.synthetic_runs import PUBLISHED

GOOD = [98.2, 96.3, 89.9]
PLANTED = [98.2, 80.0, 59.9]  # a release that loses 30 points at pos2 on every prompt


def test_a_two_build_run_states_no_build_divergence_and_its_table_in_every_format(
    make_run: Callable[..., Path],
) -> None:
    run = make_run({"v0.27.1/eager/stock": [GOOD], "v0.32.0/eager/stock": [GOOD]}, baseline=None)
    console = invoke("show", run)
    assert console.exit_code == 0, console.output
    said = "builds: no build-divergence (v0.32.0 held against reference build v0.27.1"
    assert said in console.stdout
    assert "Builds × positions" in console.stdout and "v0.27.1 (reference)" in console.stdout
    md = invoke("show", run, "--markdown").stdout
    assert said in md and "| mode/variant | build |" in md and "| `eager/stock` | v0.32.0 |" in md
    doc = json.loads(invoke("show", run, "--json").stdout)
    builds = doc["builds"]
    assert builds["divergence"] == "none" and builds["reference_build"] == "v0.27.1"
    assert [(r["build"], r["build_divergence"]) for r in builds["rows"]] == [("v0.27.1", "none"), ("v0.32.0", "none")]
    assert builds["rows"][1]["delta_vs_reference"] == [0.0, 0.0, 0.0]


def test_a_two_build_run_that_diverges_says_build_divergence_in_every_format(make_run: Callable[..., Path]) -> None:
    run = make_run({"v0.27.1/eager/stock": [GOOD], "v0.28.0/eager/stock": [PLANTED]}, baseline=None)
    console = invoke("show", run)
    assert console.exit_code == 1, console.output
    assert "builds: build-divergence (v0.28.0 held against reference build v0.27.1)" in console.stdout
    assert "-30.0" in console.stdout  # the table's pos2 gap to the reference build
    md = invoke("show", run, "--markdown").stdout
    assert "builds: build-divergence" in md and "| fail |" in md
    doc = json.loads(invoke("show", run, "--json").stdout)
    assert doc["builds"]["divergence"] == "build-divergence"
    assert doc["builds"]["rows"][1]["build_divergence"] == "fail"


def test_a_one_build_run_has_no_builds_section(make_run: Callable[..., Path]) -> None:
    run = make_run({"v0.27.1/eager/stock": [GOOD]}, baseline=None)
    assert "builds" not in json.loads(invoke("show", run, "--json").stdout)
    assert "builds:" not in invoke("show", run).stdout


def test_the_compare_command_show_suggests_runs_when_pasted(make_run: Callable[..., Path]) -> None:
    # Issue 37 item 12: it said `mtpbench compare RUN <baseline>`, which fails pasted (--baseline is required).
    run = make_run({"cpu/NONE/stock": [GOOD, GOOD]})  # the config names the published baseline
    out = invoke("show", run).stdout.replace("\n", " ")
    command = out.split("`mtpbench compare ", 1)[1].split("`", 1)[0]
    args = shlex.split(command)
    assert args == [str(run), "--baseline", str(PUBLISHED)]
    pasted = invoke("compare", *args)
    assert pasted.exit_code in (0, 1, 5), pasted.output  # judged, not refused as usage (2)
    assert "against baseline" in pasted.stdout


def test_an_inconclusive_verdict_is_not_printed_as_fail(make_run: Callable[..., Path]) -> None:
    # Issue 37 item 13: "FAIL inconclusive …" above an exit 5.
    run = make_run({"cpu/NONE/stock": [[97.0, 95.0, 88.0]] * 3}, drafts=20)  # too few drafts to certify δ
    res = invoke("compare", run, "--baseline", PUBLISHED)
    assert res.exit_code == 5, res.output
    assert "FAIL inconclusive" not in res.stdout and "INCONCLUSIVE" in res.stdout
    md = invoke("compare", run, "--baseline", PUBLISHED, "--markdown").stdout
    assert "**FAIL inconclusive**" not in md and "**INCONCLUSIVE**" in md


def test_bisects_evidence_line_gives_every_position_beside_the_al(make_run: Callable[..., Path]) -> None:
    # Issue 37 item 11: it read `… AL 3.79 → 3.02 (…)` only; docs/builds.md promises positions too.
    from mtpbench.cli.bisect_cmd import _evidence
    from mtpbench.judge.compare import judge
    from mtpbench.store.baseline import load_baseline
    from mtpbench.store.results import load_run

    run = load_run(make_run({"cpu/NONE/stock": [PLANTED, PLANTED]}))
    comp = judge(run, load_baseline(PUBLISHED), baseline_path=PUBLISHED)
    assert comp.exit_code == 1
    line = _evidence(comp)
    assert line.startswith("cpu/NONE/stock AL 3.84 → 3.38 (") and line.count("cpu/NONE/stock") == 1, line
    assert "pos0 98.2 → 98.2 % (+0.0 pts, 5 prompts)" in line
    assert "pos1 96.3 → 80.0 % (-16.3 pts, 5 prompts" in line and "pos2 89.9 → 59.9 % (-30.0 pts" in line
    # The newcomer's case: the AL (the primary endpoint) failed while no position check did on its own.
    import dataclasses

    from mtpbench.judge.findings import Verdict

    al_only = dataclasses.replace(comp, checks=[dataclasses.replace(c, verdict=Verdict.PASS) for c in comp.checks])
    line = _evidence(al_only)
    assert "AL 3.84 → 3.38" in line and "pos2 89.9 → 59.9 % (-30.0 pts, 5 prompts)" in line, line


def test_a_truncated_records_file_is_named_as_the_cause(make_run: Callable[..., Path]) -> None:
    # Issue 37 item 14: a records file cut after repeat 0 read "r1 … ok, 0/5 prompts" with "an engine crashed,
    # timed out or was interrupted", though both repeats had finished.
    run = make_run({"cpu/NONE/stock": [GOOD, GOOD]})
    records = run / "records.jsonl"
    lines = records.read_text().splitlines(keepends=True)
    records.write_text("".join(lines[: len(lines) // 2 + 1]))  # repeat 0's start and prompts, repeat 1's start
    res = invoke("show", run)
    assert res.exit_code == 3, res.output
    out = res.stdout.replace("\n", " ")
    assert "crashed" not in out
    assert "r1 (PYTHONHASHSEED=1) finished by the manifest, but records.jsonl holds 0/5 of its prompts" in out
    assert "likely cause: the run's records file (records.jsonl) holds fewer prompts than its manifest" in out
    assert "INCOMPLETE: the records file holds fewer prompts than the manifest says" in out
