"""The UpdatableGraph read-out of the metadata-binding probe (issue 21 part 1, vllm-ascend's graph path),
against fakes of vllm-ascend's code (no vllm-ascend imports here; none runs without torch_npu):

- `GraphUpdateTask` / `UpdatableGraph.register_task` / `resolve_tasks` / `SharedSource`: mirror
  vllm_ascend/compilation/updatable_graph.py @ 6f1ce9b84f9ec1bdac4df486041e2074d6ff0eed, lines 38-46
  (SharedSource), 53-66 (GraphUpdateTask.bind: `{**kwargs, **params}`), 103-128 (register_task: a
  per-provider `provider_index`), 130-137 (resolve_tasks: `source.get(provider)[provider_index]`);
- `FIAParamProvider(layer_name)`: the provider of a stored vllm-ascend attention module (the UpdatableGraph
  FIA demo; the index names neither repository nor commit, file id 60789731090): `resolve(attn_metadata)`
  returns `actual_seq_lengths` (its layer's `query_start_loc`) and `actual_seq_lengths_kv` (`seq_lens`);
- the stock draft params: one representative layer per step (`next(iter(per_layer_metadata.values()))`,
  llm_base_proposer.py @ 6f1ce9b8 :606-617), wrapped in `SharedSource` at replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from mtpbench.fixes.layer_source import LayerResolvedSource
from mtpbench.patches.probes.metadata_binding_tasks import (
    AMBIGUOUS,
    UNIDENTIFIED,
    task_group,
    task_groups,
    tasks_per_graph_ok,
)

FULL = ("draft.layers.0.attn", "draft.layers.3.attn")
SLIDING = ("draft.layers.1.attn", "draft.layers.2.attn")
GROUP_OF = {**dict.fromkeys(FULL, 4), **dict.fromkeys(SLIDING, 3)}
K = 3


@dataclass(eq=False)
class AscendMetadata:
    query_start_loc: list[int]
    seq_lens: list[int]
    block_table: object


@dataclass(frozen=True, slots=True)
class FIAParamProvider:
    layer_name: str

    def resolve(self, attn_metadata: Any) -> dict[str, Any]:
        metadata = attn_metadata[self.layer_name]
        return {"actual_seq_lengths": metadata.query_start_loc, "actual_seq_lengths_kv": metadata.seq_lens}


@dataclass(frozen=True, slots=True)
class SharedSource:
    params: Any

    def get(self, _provider: Any) -> Any:
        return self.params


@dataclass(frozen=True, slots=True)
class GraphUpdateTask:
    kwargs: dict[str, Any]
    provider: Any
    provider_index: int

    def bind(self, params: dict[str, Any]) -> GraphUpdateTask:
        return replace(self, kwargs={**self.kwargs, **params})


class UpdatableGraph:
    def __init__(self) -> None:
        self.tasks: list[GraphUpdateTask] = []
        self.provider_sizes: dict[Any, int] = {}

    def register_task(self, kwargs: dict[str, Any], provider: Any) -> None:
        index = self.provider_sizes.get(provider, 0)
        self.provider_sizes[provider] = index + 1
        self.tasks.append(GraphUpdateTask(kwargs, provider, index))

    def resolve_tasks(self, source: Any) -> tuple[GraphUpdateTask, ...]:
        by_provider = {p: source.get(p) for p in self.provider_sizes}
        for p, size in self.provider_sizes.items():
            assert len(by_provider[p]) == size
        return tuple(t.bind(by_provider[t.provider][t.provider_index]) for t in self.tasks)


def steps(full_first: bool, shared_query: bool = False) -> list[dict[str, AscendMetadata]]:
    """multi_steps_attn_metadata: per step, one metadata object per group, set for each of its layers."""
    out = []
    for step in range(K):
        query = [0, 1]
        full = AscendMetadata(query if shared_query else [0, 1], [20 + step], object())
        sliding = AscendMetadata(query if shared_query else [0, 1], [20 + step], object())  # equal values
        layers = [(n, full) for n in FULL] + [(n, sliding) for n in SLIDING]
        out.append(dict(layers if full_first else layers[2:] + layers[:2]))
    return out


def captured_graph() -> UpdatableGraph:
    graph = UpdatableGraph()
    for step in range(K):
        for name in (*FULL, *SLIDING):
            graph.register_task({"captured_step": step}, FIAParamProvider(name))
    return graph


def representative(multi: Sequence[dict[str, AscendMetadata]]) -> list[dict[str, Any]]:
    return [FIAParamProvider(next(iter(m))).resolve(m) for m in multi]


@pytest.mark.parametrize("full_first", [True, False])
def test_the_flattened_shared_source_is_localised_in_both_orders(full_first: bool) -> None:
    multi = steps(full_first)
    read = task_groups(captured_graph().resolve_tasks(SharedSource(representative(multi))), multi, GROUP_OF)
    winner = "4" if full_first else "3"
    assert read == {name: [{winner: 1}] * K for name in (*FULL, *SLIDING)}


@pytest.mark.parametrize("shared_query", [False, True])
def test_the_layer_resolved_source_binds_each_task_to_its_own_group(shared_query: bool) -> None:
    # Equal values in both groups (as sliding and full seq lens often are): identity, not equality, decides;
    # a query-lengths list shared by both groups is outvoted by the group's own seq-lens list.
    multi = steps(full_first=True, shared_query=shared_query)
    read = task_groups(captured_graph().resolve_tasks(LayerResolvedSource(multi)), multi, GROUP_OF)
    assert read == {name: [{str(GROUP_OF[name]): 1}] * K for name in (*FULL, *SLIDING)}


def test_numbers_and_copies_vote_for_nothing() -> None:
    multi = steps(full_first=True)
    assert task_group({"actual_seq_lengths_kv": [20], "block_size": 128}, multi[0], GROUP_OF) == UNIDENTIFIED
    both = {"a": multi[0][FULL[0]].seq_lens, "b": multi[0][SLIDING[0]].seq_lens}
    assert task_group(both, multi[0], GROUP_OF) == AMBIGUOUS


def test_a_captured_draft_graph_holds_one_task_per_step_and_layer() -> None:
    graph = captured_graph()
    assert tasks_per_graph_ok(graph.tasks, K, 4)
    assert not tasks_per_graph_ok(graph.tasks[:-1], K, 4)
    assert not tasks_per_graph_ok(graph.tasks + graph.tasks[:1], K, 4)
