"""Pure logic of `doctor` (reading a probe) and `selftest` (judging what the gate saw)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mtpbench.cli.selftest import evaluate
from mtpbench.judge.compare import judge
from mtpbench.run.doctor import checks_from_probe
from mtpbench.store.baseline import load_baseline
from mtpbench.store.results import load_run
from tests.support.probe_records import add_probe_records, faulty_by_seed
from tests.support.synthetic_runs import PUBLISHED

GOOD = [98.2, 96.3, 89.9]


def probe(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "python": "3.11.7",
        "executable": "/x/python",
        "platform": "Linux",
        "cpus": 2,
        "versions": {"vllm": "0.32.0", "torch": "2.13.0+cpu", "torchvision": None},
        "errors": {},
        "torch": {"version": "2.13.0+cpu", "cuda": False, "device": None},
        "vllm": {"version": "0.32.0", "platform": "CpuPlatform", "device_type": "cpu"},
    }
    base.update(over)
    return base


def by_name(checks: list[Any]) -> dict[str, Any]:
    return {c.name: c for c in checks}


def test_doctor_healthy_cpu_build() -> None:
    checks = by_name(checks_from_probe(probe()))
    assert checks["vllm import"].status == "ok" and "CpuPlatform" in checks["vllm import"].detail
    assert checks["device"].detail.startswith("CPU only")
    assert not any(c.status == "fail" for c in checks.values())


def test_doctor_names_the_broken_cuda_torchvision() -> None:
    p = probe(
        versions={"vllm": "0.32.0", "torch": "2.13.0+cpu", "torchvision": "0.28.0"},
        errors={"torchvision": "RuntimeError: operator torchvision::nms does not exist"},
    )
    tv = by_name(checks_from_probe(p))["torchvision"]
    assert tv.status == "fail" and "pip uninstall -y torchvision torchaudio torchcodec" in tv.detail


def test_doctor_reports_missing_vllm_and_dead_interpreter() -> None:
    p = probe(errors={"vllm": "ModuleNotFoundError: No module named 'vllm'"})
    del p["vllm"]
    assert by_name(checks_from_probe(p))["vllm import"].status == "fail"
    dead = checks_from_probe({"errors": {"probe": "cannot run /nope/python"}})
    assert [(c.name, c.status) for c in dead] == [("interpreter", "fail")]


def _selftest_run(
    make_run: Callable[..., Path],
    fault: list[list[float]],
    text: list[str] | None = None,
    probe: Callable[[dict[str, Any]], dict[str, Any] | None] = faulty_by_seed,
) -> Any:
    cells = {"cpu/eager/stock": [GOOD, GOOD], "cpu/eager/fault": fault}
    kw: dict[str, Any] = {"seeds": [0, 2], "text": {"cpu/eager/fault": text} if text else None}
    run = add_probe_records(make_run(cells, **kw), probe)
    # The published figures as an any-mode baseline: the selftest compares its eager cells with it.
    any_mode = run.parent / "any-mode.yaml"
    any_mode.write_text(PUBLISHED.read_text().replace("mode: NONE", 'mode: "*"'))
    return judge(load_run(run), load_baseline(any_mode))


def test_selftest_passes_when_fault_is_regression_and_instability_with_same_text(make_run: Callable[..., Path]) -> None:
    comp = _selftest_run(make_run, [[76.2, 61.0, 50.2], [39.2, 14.4, 10.1]])
    ok, lines = evaluate(comp)
    assert ok, lines
    text = "\n".join(lines)
    assert "[ok] stock cpu/eager/stock passes the gate" in text
    assert "fault cpu/eager/fault flagged as regression" in text
    assert "fault cpu/eager/fault flagged as cross-process-instability" in text
    assert "[ok] generated text identical" in text
    assert "PYTHONHASHSEED=2: pos 39.2/14.4/10.1 %" in text


def test_selftest_reports_the_localisation(make_run: Callable[..., Path]) -> None:
    ok, lines = evaluate(_selftest_run(make_run, [[76.2, 61.0, 50.2], [39.2, 14.4, 10.1]]))
    text = "\n".join(lines)
    assert ok, lines
    assert "[ok] stock cpu/eager/stock: every draft layer read its own KV-cache group" in text
    assert (
        "[ok] fault cpu/eager/fault localised: PYTHONHASHSEED 0: draft layers 1-2 (sliding attention, group 3) "
        "read group 4 (full attention)"
    ) in text
    assert "PYTHONHASHSEED 2: draft layers 0, 3 (full attention, group 4) read group 3 (sliding attention)" in text


@pytest.mark.parametrize("probe", ["fault-bound-correctly", "one-order-only", "stock-misbound", "no-probe-record"])
def test_selftest_fails_when_the_probe_does_not_localise(make_run: Callable[..., Path], probe: str) -> None:
    def snap(rec: dict[str, Any]) -> dict[str, Any] | None:
        if probe == "no-probe-record" and rec["variant"] == "stock":
            return None
        if probe == "stock-misbound" and rec["variant"] == "stock":
            return faulty_by_seed({**rec, "variant": "fault"})
        if rec["variant"] == "fault" and probe == "fault-bound-correctly":
            return faulty_by_seed({**rec, "variant": "stock"})
        if rec["variant"] == "fault" and probe == "one-order-only":
            return faulty_by_seed({**rec, "hash_seed": 0})
        return faulty_by_seed(rec)

    ok, lines = evaluate(_selftest_run(make_run, [[76.2, 61.0, 50.2], [39.2, 14.4, 10.1]], probe=snap))
    assert not ok
    assert any(line.startswith("[FAIL]") and ("localised" in line or "own KV-cache group" in line) for line in lines)


def test_selftest_fails_when_fault_is_stable(make_run: Callable[..., Path]) -> None:
    comp = _selftest_run(make_run, [[39.2, 14.4, 10.1], [39.2, 14.4, 10.1]])
    ok, lines = evaluate(comp)
    assert not ok
    assert "[FAIL] fault cpu/eager/fault flagged as cross-process-instability" in lines


def test_selftest_fails_when_text_changes(make_run: Callable[..., Path]) -> None:
    comp = _selftest_run(make_run, [[76.2, 61.0, 50.2], [39.2, 14.4, 10.1]], text=["x", "y"])
    ok, lines = evaluate(comp)
    assert not ok and any(line.startswith("[FAIL] generated text identical") for line in lines)
