"""A request that ends at end-of-sequence before max_tokens, replayed as vLLM 0.32 counts it (issue 29: "the
replay must follow the engine's step boundaries"; h6 found no HumanEval prompt that stopped at EOS).

What vLLM does, read from its code (vllm/v1/core/sched/scheduler.py `update_from_output` and
`_update_request_with_output`, sched/utils.py `check_stop`, sampling_params.py
`update_from_generation_config`), mirrored by `scheduler_counts` below on constructed token sequences:
- the greedy rejection sampler knows nothing of EOS: a step accepts the longest prefix of drafts equal to
  the target's greedy tokens, and the target's token after an accepted EOS is its greedy continuation past it;
- the step's counts (num_accepted = len(sampled) − 1, per position) are taken from all sampled tokens before
  the stop check trims them, so drafts accepted past the EOS are counted;
- then each sampled token is appended and `check_stop` runs: EOS (or a generation-config eos id) ends the
  request there, the rest of the step is trimmed; max_tokens likewise;
- a stopped request is never drafted for again (its pending drafts are dropped, never verified);
- `ignore_eos=True` sets no eos_token_id and adds no generation-config eos to stop_token_ids: the request
  runs through EOS to max_tokens.
The reference (replay.stop_index + walk.walk over hits) must give the same counts and the same text length.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mtpbench.reference.walk import walk
from mtpbench.reference.weights_replay import stop_index
from mtpbench.store.results import load_run
from tests.support.synthetic_runs import write_run

EOS = 258  # the embedded pair's end-of-sequence id (generation_config.json)
K = 3


def scheduler_counts(
    target: list[int], drafts: list[list[int]], k: int, max_tokens: int, stops: frozenset[int]
) -> tuple[list[int], int, int, list[int]]:
    """vLLM's loop for one greedy request: (output token ids, num_drafts, num_accepted_tokens, per position).

    `target[i]` is the target's greedy token after i generated tokens (continuing past any EOS); `drafts[i]`
    the k drafts proposed from the start after i + 1 generated tokens."""
    output: list[int] = []
    num_drafts = num_accepted = 0
    per_pos = [0] * k

    def append(tokens: list[int]) -> bool:  # _update_request_with_output: append, check_stop, trim
        for token in tokens:
            output.append(token)
            if token in stops or len(output) >= max_tokens:
                return True
        return False

    stopped = append([target[0]])  # the prefill samples the first token
    while not stopped:
        n = len(output)
        proposed = drafts[n - 1][:k]
        sampled = [target[n]]
        for j, d in enumerate(proposed):  # greedy rejection: accept while the draft is the target's token
            if d != target[n + j]:
                break
            sampled.append(target[n + j + 1])
        accepted = len(sampled) - 1  # counted before the stop check trims the step
        num_drafts += 1
        num_accepted += accepted
        for i in range(accepted):
            per_pos[i] += 1
        stopped = append(sampled)
    return output, num_drafts, num_accepted, per_pos


def reference_counts(
    target: list[int], drafts: list[list[int]], k: int, max_tokens: int, stops: frozenset[int]
) -> tuple[list[int], int, int, list[int]]:
    """What mtpbench/reference computes: where the text stops, then the walk over the hits."""
    n, _reason = stop_index(stops, target, max_tokens, room=len(target))
    hits = np.array([[d[j] == target[i + 1 + j] for j in range(k)] for i, d in enumerate(drafts)], dtype=bool)
    w = walk(hits, n, k)
    return target[:n], w.num_drafts, w.num_accepted_tokens, list(w.accepted_per_pos(k))


def _drafts_matching(target: list[int], k: int, wrong: dict[tuple[int, int], int]) -> list[list[int]]:
    """Drafts equal to the target's tokens from every start, except `wrong[(start, j)]`."""
    return [[wrong.get((i, j), target[i + 1 + j]) for j in range(k)] for i in range(len(target) - k - 1)]


def test_drafts_accepted_past_eos_are_counted_and_the_text_ends_at_eos() -> None:
    # Greedy text: 1 2 3 4 EOS, then the target's own continuation past EOS (7 8 9). From start 0 (after
    # token 1) the drafts 2 3 4 are all accepted (n = 5 with the bonus EOS): stop. From no further start.
    target = [1, 2, 3, 4, EOS, 7, 8, 9, 10]
    drafts = _drafts_matching(target, K, {})
    out = scheduler_counts(target, drafts, K, 128, frozenset({EOS}))
    assert out == ([1, 2, 3, 4, EOS], 1, 3, [1, 1, 1])
    assert reference_counts(target, drafts, K, 128, frozenset({EOS})) == out


def test_eos_as_an_accepted_draft_counts_the_drafts_after_it() -> None:
    # Start 0 accepts 3 (n = 5); start 4 (after 1 2 3 4 5) drafts EOS 7 8 and the target agrees past its EOS:
    # three drafts accepted, though the text ends at EOS: the step's counts come before the trim.
    target = [1, 2, 3, 4, 5, EOS, 7, 8, 9, 10]
    drafts = _drafts_matching(target, K, {})
    out = scheduler_counts(target, drafts, K, 128, frozenset({EOS}))
    assert out == ([1, 2, 3, 4, 5, EOS], 2, 6, [2, 2, 2])
    assert reference_counts(target, drafts, K, 128, frozenset({EOS})) == out


def test_eos_at_the_prefill_drafts_nothing() -> None:
    target = [EOS, 1, 2, 3, 4, 5]
    drafts = _drafts_matching(target, K, {})
    out = scheduler_counts(target, drafts, K, 128, frozenset({EOS}))
    assert out == ([EOS], 0, 0, [0, 0, 0])
    assert reference_counts(target, drafts, K, 128, frozenset({EOS})) == out


def test_a_rejected_draft_before_eos_leaves_a_step_that_ends_on_the_bonus_eos() -> None:
    # Start 0: drafts 2 x ... -> 1 accepted (n = 3); start 2: drafts 4 EOS 9 -> 2 accepted and the bonus
    # (n = 6 > 5 tokens of text): the step ran past the stop, counted in full.
    target = [1, 2, 3, 4, EOS, 9, 10, 11, 12]
    drafts = _drafts_matching(target, K, {(0, 1): 99})
    out = scheduler_counts(target, drafts, K, 128, frozenset({EOS}))
    assert out == ([1, 2, 3, 4, EOS], 2, 4, [2, 1, 1])
    assert reference_counts(target, drafts, K, 128, frozenset({EOS})) == out


def test_ignore_eos_runs_through_eos_to_max_tokens() -> None:
    # The run's sampling has ignore_eos: vLLM stops at max_tokens only, and so must the reference.
    target = [1, 2, EOS, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    drafts = _drafts_matching(target, K, {(0, 0): 99})
    engine = scheduler_counts(target, drafts, K, 8, frozenset())
    assert len(engine[0]) == 8 and EOS in engine[0]
    assert reference_counts(target, drafts, K, 8, frozenset()) == engine
    assert stop_index(frozenset(), target, max_tokens=8, room=100) == (8, "length")
    assert stop_index(frozenset({EOS}), target, max_tokens=8, room=100) == (3, "stop")


@pytest.mark.parametrize("seed", range(40))
def test_constructed_requests_ending_at_eos_count_what_the_scheduler_counts(seed: int) -> None:
    # Random texts with an EOS somewhere before max_tokens (or none), random drafts that are right 80 % of the
    # time: every walk the scheduler makes, the reference makes.
    rng = np.random.default_rng(seed)
    max_tokens = int(rng.integers(4, 40))
    length = max_tokens + K + 2
    target = [int(t) for t in rng.integers(0, 50, size=length)]
    if rng.random() < 0.8:
        target[int(rng.integers(0, max_tokens))] = EOS
    wrong = {
        (i, j): 99 for i in range(length - K - 1) for j in range(K) if rng.random() < 0.2
    }  # 99 is never a target token
    drafts = _drafts_matching(target, K, wrong)
    for stops in (frozenset({EOS}), frozenset()):
        assert reference_counts(target, drafts, K, max_tokens, stops) == scheduler_counts(
            target, drafts, K, max_tokens, stops
        )


@pytest.mark.parametrize("recorded", [None, False, True])
def test_the_runs_ignore_eos_reaches_the_replay(tmp_path: Path, recorded: bool | None) -> None:
    # compute_reference reads run.typed.config.sampling.ignore_eos: a manifest written before the field was
    # read back (or by a config that never set it) means vLLM's default, stopping at EOS.
    run = write_run(tmp_path / "r", {"current/eager/stock": [[90.0, 80.0, 70.0]]}, baseline=None)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["sampling"].pop("ignore_eos", None)
    if recorded is not None:
        manifest["config"]["sampling"]["ignore_eos"] = recorded
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert load_run(run).typed.config.sampling.ignore_eos is bool(recorded)
