"""The planted feature fault (issue 31): `prefix-caching-fault` perturbs drafts only in an engine whose config has
prefix caching on, so a prefix-caching mode held against a reference without it is a `mode-divergence` naming
the feature. Pure logic against a fake proposer (the real engine run is in docs/features.md)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mtpbench.patches.faults import prefix_caching_fault as cached

torch = pytest.importorskip("torch")


class FakeProposer:
    def __init__(self, prefix_caching: bool) -> None:
        self.vllm_config = SimpleNamespace(cache_config=SimpleNamespace(enable_prefix_caching=prefix_caching))

    def propose(self) -> Any:
        return torch.tensor([[5, 6, 7], [0, 9, 0]])


def test_drafts_are_perturbed_from_position_1_only_with_prefix_caching_on() -> None:
    propose = cached.corrupting(FakeProposer.propose)
    on = propose(FakeProposer(prefix_caching=True))
    assert on.tolist() == [[5, 5, 6], [0, 8, 1]]  # position 0 untouched: acceptance falls, never to zero
    off = propose(FakeProposer(prefix_caching=False))
    assert off.tolist() == [[5, 6, 7], [0, 9, 0]]


def test_the_fault_is_in_the_registry_and_wraps_once() -> None:
    from mtpbench.fixes.registry import REGISTRY

    assert REGISTRY["prefix-caching-fault"] == "mtpbench.patches.faults.prefix_caching_fault:apply"
    once = cached.corrupting(FakeProposer.propose)
    assert getattr(once, "__mtpbench_prefix_caching_fault__", False)
