"""Pure parts of the soak workload and its fault: which prompts a round sends (engine/soak.py), and the
`drift-after-requests` patch's perturbation and switch (patches/faults/drift_after_requests.py), without an engine."""

from __future__ import annotations

from typing import Any

import pytest

from mtpbench.engine.soak import round_prompts
from mtpbench.patches import PatchNotApplicable
from mtpbench.patches.faults import drift_after_requests as fault
from mtpbench.patches.faults.draft_perturbation import perturb

PROMPTS = [{"id": f"p{i}", "text": f"text {i}"} for i in range(6)]


def job(**wl: Any) -> dict[str, Any]:
    return {
        "prompts": PROMPTS,
        "soak_other_prompts": [{"id": "x", "text": "other"}],
        "workload": {"kind": "soak", "rounds": 4, **wl},
    }


def test_rounds_cycle_the_order_and_shuffle_deterministically_by_round() -> None:
    j = job(order=["A", "A-shuffled", "B"], repeated_prefix="# shared\n")
    name0, r0 = round_prompts(j, 0)
    name1, r1 = round_prompts(j, 1)
    name2, r2 = round_prompts(j, 2)
    assert (name0, name1, name2, round_prompts(j, 3)[0]) == ("A", "A-shuffled", "B", "A")
    assert [p["id"] for p in r0] == [p["id"] for p in PROMPTS]
    assert sorted(p["id"] for p in r1) == sorted(p["id"] for p in PROMPTS) and r1 != r0
    assert r1 == round_prompts(j, 1)[1]  # the same order every time for the same round
    assert r2 == [{"id": "B:x", "text": "# shared\nother"}]
    assert all(p["text"].startswith("# shared\n") for p in r0 + r1)


def test_the_fault_moves_every_draft_from_position_1_to_another_valid_id() -> None:
    torch = pytest.importorskip("torch")
    drafts = torch.tensor([[5, 0, 7], [1, 2, 3]])
    out = perturb(drafts)
    assert out.tolist() == [[5, 1, 6], [1, 1, 2]]
    assert drafts.tolist() == [[5, 0, 7], [1, 2, 3]]  # not in place
    assert perturb(torch.tensor([[4]])).tolist() == [[4]]  # k=1: nothing after position 0


def test_the_fault_switches_on_after_n_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(fault, "_seen", {"requests": 0, "corrupted_steps": 0})
    propose = fault._corrupting(lambda self: torch.tensor([[3, 3, 3]]), n=2)
    add = fault._counting(lambda self, req: None)
    for _ in range(2):
        add(None, "req")
        assert propose(None).tolist() == [[3, 3, 3]]
    add(None, "req")
    assert propose(None).tolist() == [[3, 2, 2]]
    assert fault._seen == {"requests": 3, "corrupted_steps": 1}


@pytest.mark.parametrize("raw", ["many", "-1", "1.5"])
def test_a_bad_request_count_is_refused_not_guessed(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(fault.AFTER_ENV, raw)
    with pytest.raises(PatchNotApplicable, match=fault.AFTER_ENV):
        fault.after()


def test_the_default_request_count_is_the_embedded_prompt_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(fault.AFTER_ENV, raising=False)
    assert fault.after() == fault.DEFAULT_AFTER == 40
