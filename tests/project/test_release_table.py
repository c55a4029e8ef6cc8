"""benchmarks/release_table.py (issue 38 item 5): ONE table of the release sweep across methods, method x
release x mode, each cell's per-prompt counts held against the newest release's of the same method and mode
(how many prompts are identical) and against its own release's eager cell. On constructed runs of two methods."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.reference_runs import GOOD, WORSE, per_prompt

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "release_table.py"


@pytest.fixture(scope="module")
def rt() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release_table", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["release_table"] = mod
    spec.loader.exec_module(mod)
    return mod


def _sweep(
    make_run: Callable[..., Path], method: str, changed: str | None = None, other_text: str | None = None
) -> Path:
    """v1 and v2, eager and compiled; `changed` (a build/mode) counts fewer drafts on its first prompt;
    `other_text` (a build/mode) generates other text on every prompt."""
    cells = [f"{b}/{m}/stock" for b in ("v1", "v2") for m in ("eager", "compiled")]
    counts = {}
    for cell in cells:
        prompts = per_prompt(GOOD)
        if changed and cell.startswith(changed + "/"):
            prompts = [[WORSE, *prompts[0][1:]]]
        counts[cell] = prompts
    text = {c: ["other" if other_text and c.startswith(other_text + "/") else "same"] for c in cells}
    return make_run({c: [[0.0]] for c in cells}, per_prompt=counts, text=text, method=method, seeds=[0], baseline=None)


def _rows(rt: ModuleType, text: str) -> dict[tuple[str, str, str], list[str]]:
    rows = [[x.strip() for x in line.strip("|").split("|")] for line in text.splitlines()[2:]]
    return {(r[0], r[1], r[2]): r for r in rows}


def test_one_table_holds_every_method_release_and_mode_against_the_newest_release(
    rt: ModuleType, make_run: Callable[..., Path]
) -> None:
    mtp = _sweep(make_run, "mtp")
    ngram = _sweep(make_run, "ngram", changed="v1/compiled")
    text = rt.markdown(rt.rows([rt.parse_arg(str(mtp)), rt.parse_arg(str(ngram))]))
    assert "identical to the newest release (same mode)" in text.splitlines()[0]
    rows = _rows(rt, text)
    assert sorted(rows) == sorted(
        (m, b, mode) for m in ("mtp", "ngram") for b in ("v1", "v2") for mode in ("eager", "compiled")
    )
    # Columns: 8 the newest release's, 9 the own eager's; every prompt identical except ngram v1 compiled.
    assert rows[("mtp", "v1", "eager")][8] == "5 of 5" and rows[("mtp", "v2", "eager")][8] == "(newest)"
    assert rows[("mtp", "v1", "compiled")][9] == "5 of 5"
    assert rows[("ngram", "v1", "compiled")][8] == "**4 of 5**"
    assert rows[("ngram", "v1", "compiled")][9] == "**4 of 5**"
    assert rows[("ngram", "v1", "eager")][8] == "5 of 5"
    # Column 10, the text against the newest release's: the changed counts came with the same text.
    assert rows[("ngram", "v1", "compiled")][10] == "5 of 5" and rows[("ngram", "v2", "compiled")][10] == "(newest)"
    # Eager rows first within a method, each mode's releases in the config's (oldest first) order.
    assert [k for k in rows if k[0] == "ngram"] == [
        ("ngram", "v1", "eager"),
        ("ngram", "v2", "eager"),
        ("ngram", "v1", "compiled"),
        ("ngram", "v2", "compiled"),
    ]


def test_a_cell_filter_keeps_only_the_named_cells(rt: ModuleType, make_run: Callable[..., Path]) -> None:
    run = _sweep(make_run, "ngram")
    text = rt.markdown(rt.rows([rt.parse_arg(f"{run}=v1/eager,v2/eager")]))
    assert sorted(_rows(rt, text)) == [("ngram", "v1", "eager"), ("ngram", "v2", "eager")]


def _target_family(run: Path, tmp: Path, model_type: str) -> None:
    """Point the run's config at a target checkpoint folder whose config.json names `model_type`."""
    target = tmp / f"target-{model_type}"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
    manifest_path = run / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["config"]["model"] = str(target)
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")


def test_two_mtp_families_are_two_methods_each_held_against_its_own_newest_release(
    rt: ModuleType, make_run: Callable[..., Path], tmp_path: Path
) -> None:
    # Gemma4's MTP and DeepSeek's are both `method: mtp`; a DeepSeek release that changed must not be held
    # against (or hide behind) Gemma4's newest release.
    gemma4 = _sweep(make_run, "mtp")
    deepseek = _sweep(make_run, "mtp", changed="v1/eager")
    _target_family(gemma4, tmp_path, "gemma4")
    _target_family(deepseek, tmp_path, "deepseek_v3")
    rows = _rows(rt, rt.markdown(rt.rows([rt.parse_arg(str(gemma4)), rt.parse_arg(str(deepseek))])))
    assert {k[0] for k in rows} == {"mtp (gemma4)", "mtp (deepseek_v3)"}
    assert rows[("mtp (gemma4)", "v2", "eager")][8] == "(newest)"
    assert rows[("mtp (deepseek_v3)", "v2", "eager")][8] == "(newest)"
    assert rows[("mtp (gemma4)", "v1", "eager")][8] == "5 of 5"
    assert rows[("mtp (deepseek_v3)", "v1", "eager")][8] == "**4 of 5**"


def test_the_text_column_tells_a_release_that_changed_the_targets_text(
    rt: ModuleType, make_run: Callable[..., Path]
) -> None:
    # Counts and text both moved in v1 eager (the target's numerics), text alone nowhere else.
    run = _sweep(make_run, "draft_model", changed="v1/eager", other_text="v1/eager")
    rows = _rows(rt, rt.markdown(rt.rows([rt.parse_arg(str(run))])))
    assert rows[("draft_model", "v1", "eager")][8] == "**4 of 5**"
    assert rows[("draft_model", "v1", "eager")][10] == "**0 of 5**"
    assert rows[("draft_model", "v1", "compiled")][10] == "5 of 5"


def test_a_failed_cell_shows_its_first_error_line_with_the_file_named_from_site_packages(rt: ModuleType) -> None:
    error = (
        "ImportError: cannot import name 'x' from 'vllm.a' (/root/.cache/mtpbench/builds/k/lib/python3.11/"
        "site-packages/vllm/a.py)\n  File ..."
    )
    assert rt.short_error(error) == "ImportError: cannot import name 'x' from 'vllm.a' (vllm/a.py)"
    assert rt.short_error("NotImplementedError: MLA is not supported on CPU.") == (
        "NotImplementedError: MLA is not supported on CPU."
    )
    assert rt.short_error("") == ""
