"""Run down the prompts of a run whose engine counts differ from its stored reference (`mtpbench reference RUN`
first): how many undrafted tokens turn the reference's walk into the engine's counts exactly.

A request decodes a token with no draft step when it resumes after vLLM's scheduler preempted it (its KV
blocks freed when the cache ran out, its text recomputed; vllm/v1/core/sched/scheduler.py at v0.32.0,
`schedule()`'s preemption of `self.running[-1]`): the walk of mtpbench/reference/walk.py, which drafts at
every step, then shifts by one token from that point on. For each differing prompt this script recomputes the
hits from the weights (the reference's own replay, mtpbench/reference/compute.py `_replays`, its walk's input
kept), inserts one, then two, undrafted tokens at every step boundary, and reports which count reproduces the
engine's (num_drafts, accepted per position) and at how many placements. A prompt that no placement explains
is a disagreement of another kind.

    python benchmarks/undrafted_tokens.py runs/<id>
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np

from mtpbench.reference.walk import Walk, leading_hits

MAX_UNDRAFTED = 2


def walk_with_undrafted(hits: np.ndarray, generated: int, k: int, before_steps: frozenset[int]) -> Walk:
    """The walk of a request that decodes one token undrafted just before each step index in `before_steps`
    (no model-length cap: the runs this reads stop at max_tokens well inside max_model_len)."""
    drafted: list[int] = []
    accepted: list[int] = []
    pending = set(before_steps)
    n = 1
    while n < generated:
        if len(accepted) in pending:
            pending.discard(len(accepted))
            n += 1
            continue
        a = leading_hits(hits[n - 1, :k])
        drafted.append(k)
        accepted.append(a)
        n += a + 1
    return Walk(tuple(drafted), tuple(accepted))


def _counts(w: Walk, k: int) -> tuple[int, tuple[int, ...]]:
    return w.num_drafts, w.accepted_per_pos(k)


def undrafted_placements(
    hits: np.ndarray, generated: int, k: int, steps: int, engine: tuple[int, tuple[int, ...]]
) -> tuple[int, list[tuple[int, ...]]]:
    """The fewest undrafted tokens (1..MAX_UNDRAFTED) whose walk counts `engine` = (num_drafts, accepted per
    position) exactly, and every placement (step indices) that does; (0, []) when none does."""
    for count in range(1, MAX_UNDRAFTED + 1):
        fits = [
            at
            for at in itertools.combinations(range(steps + 1), count)
            if _counts(walk_with_undrafted(hits, generated, k, frozenset(at)), k) == engine
        ]
        if fits:
            return count, fits
    return 0, []


def _differing(run: Any) -> tuple[dict[str, dict[str, Any]], list[str]]:
    from mtpbench.store.reference_records import read_reference

    ref = read_reference(run.path)
    if ref is None:
        sys.exit(f"{run.path}: no finished reference; run `mtpbench reference {run.path}` first")
    engine = {r["prompt_id"]: r for r in run.records if r["type"] == "prompt"}
    replayed = {p.prompt_id: p for p in ref.prompts}
    differing = [
        pid
        for pid, r in engine.items()
        if (r["num_drafts"], tuple(r["accepted_per_pos"])) != (replayed[pid].num_drafts, replayed[pid].accepted_per_pos)
    ]
    return engine, differing


def main(run_dir: Path) -> None:
    import mtpbench.reference.draft_model as draft_model_replay
    import mtpbench.reference.weights_replay as weights_replay
    from mtpbench.reference.compute import _cell_numerics, _prompts, _replays
    from mtpbench.reference.pair import check_pair, load_pair
    from mtpbench.reference.weights_replay import prompt_token_ids
    from mtpbench.store.results import load_run

    run = load_run(run_dir)
    engine, differing = _differing(run)
    raw = run.manifest["config"]
    spec = raw["speculative"]
    k = run.typed.k
    texts, chat = _prompts(run)
    chosen = [(pid, text) for pid, text in texts if pid in differing]
    numerics = next(iter(_cell_numerics(run).values()))
    pair = load_pair(check_pair(raw["model"], spec["model"], spec["method"]), numerics.dtype, "cpu")
    kept: list[np.ndarray] = []
    original = weights_replay.walk

    def keeping(hits: np.ndarray, *args: Any, **kwargs: Any) -> Walk:
        kept.append(np.asarray(hits, dtype=bool))
        return original(hits, *args, **kwargs)

    # The replay modules imported `walk` by name: keep its input where each of them calls it.
    draft_model_replay.walk = keeping  # type: ignore[assignment]
    weights_replay.walk = keeping  # type: ignore[assignment]
    ids = [prompt_token_ids(pair, text, chat) for _, text in chosen]
    max_tokens = int(run.typed.config.sampling.max_tokens or 0)
    replays = list(_replays(pair, spec["method"], None, ids, k, max_tokens, numerics, 32, False))
    print(f"{run.run_id}: {len(differing)} of {len(engine)} prompts differ from the reference")
    for (pid, _), hits, rep in zip(chosen, kept, replays, strict=True):
        e = engine[pid]
        target = (int(e["num_drafts"]), tuple(e["accepted_per_pos"]))
        count, fits = undrafted_placements(hits, rep.num_generated_tokens, k, rep.walk.num_drafts, target)
        first = f"first fit before step {fits[0][0]}, {len(fits)} placements fit" if fits else "no placement fits"
        print(
            f"  {pid} (prompt index {e['prompt_index']}): engine {target} vs reference "
            f"({rep.walk.num_drafts}, {rep.walk.accepted_per_pos(k)}): {count or 'no'} undrafted token(s); {first}"
        )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/undrafted_tokens.py RUN")
    main(Path(sys.argv[1]))
