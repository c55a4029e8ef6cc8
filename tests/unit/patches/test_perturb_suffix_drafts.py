"""The suffix method's planted fault (issue 38 item 6): `perturb-suffix-drafts` wraps vLLM's
`SuffixDecodingProposer.propose`, which returns one list of draft ids per request, of any length up to k
(vllm/v1/spec_decode/suffix_decoding.py at v0.32.0, lines 34-98), and moves every draft from position 1 on to a
neighbouring id. Pure logic against a fake proposer whose `propose` returns what that method returns; the
engine run of it is the selftest's (tests/engine/)."""

from __future__ import annotations

from mtpbench.fixes.registry import REGISTRY
from mtpbench.patches.faults import perturb_ngram_drafts
from mtpbench.patches.faults import perturb_suffix_drafts as fault


class FakeSuffixProposer:
    def __init__(self, drafts: list[list[int]]) -> None:
        self.drafts = drafts

    def propose(self, *args: object, **kwargs: object) -> list[list[int]]:
        return [list(d) for d in self.drafts]


def test_drafts_are_perturbed_from_position_1_on_and_its_own_steps_are_counted() -> None:
    before, ngram_before = dict(fault.observations()), dict(perturb_ngram_drafts.observations())
    propose = fault.corrupting(FakeSuffixProposer.propose)
    assert propose(FakeSuffixProposer([[5, 6, 7], [0, 0], [9], []])) == [[5, 5, 6], [0, 1], [9], []]
    assert propose(FakeSuffixProposer([[4], []])) == [[4], []]
    after = fault.observations()
    assert (after["steps"], after["corrupted_steps"]) == (before["steps"] + 2, before["corrupted_steps"] + 1)
    assert perturb_ngram_drafts.observations() == ngram_before  # each fault counts its own proposer


def test_the_fault_is_in_the_registry_and_marks_its_wrapper() -> None:
    assert REGISTRY["perturb-suffix-drafts"] == "mtpbench.patches.faults.perturb_suffix_drafts:apply"
    assert getattr(fault.corrupting(FakeSuffixProposer.propose), "__mtpbench_perturb_suffix_drafts__", False)
