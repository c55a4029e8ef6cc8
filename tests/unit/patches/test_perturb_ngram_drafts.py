"""The n-gram method's planted fault (issue 38 item 6): `perturb-ngram-drafts` wraps vLLM's
`NgramProposer.propose`, which returns one list of draft ids per request (vllm/v1/spec_decode/ngram_proposer.py
at v0.32.0, lines 138-173), and moves every draft from position 1 on to a neighbouring id. Pure logic against
a fake proposer whose `propose` returns what that method returns (lists, possibly short or empty); the engine
run of it is the selftest's (tests/engine/)."""

from __future__ import annotations

from mtpbench.fixes.registry import REGISTRY
from mtpbench.patches.faults import perturb_ngram_drafts as fault


class FakeNgramProposer:
    def __init__(self, drafts: list[list[int]]) -> None:
        self.drafts = drafts

    def propose(self, *args: object, **kwargs: object) -> list[list[int]]:
        return [list(d) for d in self.drafts]


def test_drafts_are_perturbed_from_position_1_on_and_short_drafts_are_left_alone() -> None:
    propose = fault.corrupting(FakeNgramProposer.propose)
    out = propose(FakeNgramProposer([[5, 6, 7], [0, 0], [9], []]))
    assert out == [[5, 5, 6], [0, 1], [9], []]  # position 0 untouched: acceptance falls, never to zero


def test_a_step_with_no_draft_of_two_tokens_is_counted_but_not_corrupted() -> None:
    before = dict(fault.observations())
    propose = fault.corrupting(FakeNgramProposer.propose)
    propose(FakeNgramProposer([[4], []]))
    propose(FakeNgramProposer([[4, 4]]))
    after = fault.observations()
    assert after["steps"] == before["steps"] + 2
    assert after["corrupted_steps"] == before["corrupted_steps"] + 1


def test_the_fault_is_in_the_registry_and_marks_its_wrapper() -> None:
    assert REGISTRY["perturb-ngram-drafts"] == "mtpbench.patches.faults.perturb_ngram_drafts:apply"
    assert getattr(fault.corrupting(FakeNgramProposer.propose), "__mtpbench_perturb_ngram_drafts__", False)
