"""`mtpbench reference` (issue 29) on constructed runs: the exit code is the verdict against the stored
reference (1 below it, 0 matching), and what the reference does not model is one line and exit 2 before any
model is loaded."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from mtpbench.errors import UserError
from mtpbench.judge.compare import judge
from mtpbench.judge.findings import Cause, Kind
from mtpbench.store.results import load_run
from tests.support.cli import invoke, one_error_line
from tests.support.reference_runs import CELL, GOOD, WORSE, per_prompt, write_reference
from tests.support.synthetic_runs import PROMPTS


def _set_pair(run: Path, target: Path, drafter: Path | None) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["model"] = str(target)
    manifest["config"]["speculative"]["model"] = None if drafter is None else str(drafter)
    (run / "manifest.json").write_text(json.dumps(manifest))


def test_a_stored_reference_the_engine_falls_below_exits_1(make_run: Callable[..., Path]) -> None:
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(WORSE)}, baseline=None)
    write_reference(run, [CELL])
    result = invoke("reference", run, "--stored")
    assert result.exit_code == 1, result.output
    assert f"FAIL engine-below-reference {CELL}" in result.stdout
    assert "0 of 5 prompt observations" in result.stdout


def test_a_stored_reference_the_engine_matches_exits_0_and_says_so_in_json(make_run: Callable[..., Path]) -> None:
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(GOOD)}, baseline=None)
    write_reference(run, [CELL])
    result = invoke("reference", run, "--stored", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (cell,) = doc["cells"]
    assert (cell["exact"], cell["same_text"], cell["observations"]) == (len(PROMPTS), len(PROMPTS), len(PROMPTS))
    assert doc["findings"] == [] and doc["exit_code"] == 0


def test_no_stored_reference_is_one_line_and_exit_2(make_run: Callable[..., Path]) -> None:
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(GOOD)}, baseline=None)
    result = invoke("reference", run, "--stored")
    assert result.exit_code == 2
    assert "no finished reference stored" in one_error_line(result)


def test_a_sampled_run_is_refused(make_run: Callable[..., Path]) -> None:
    run = make_run({CELL: [[90.0, 80.0, 70.0]]}, temperature=0.8, baseline=None)
    result = invoke("reference", run)
    assert result.exit_code == 2
    assert "replays greedy decoding; this run samples at temperature 0.8" in one_error_line(result)


def test_an_architecture_it_does_not_model_is_one_line_naming_it(make_run: Callable[..., Path], tmp_path: Path) -> None:
    target = tmp_path / "llama"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(GOOD)}, baseline=None)
    _set_pair(run, target, tmp_path / "drafter")
    result = invoke("reference", run)
    assert result.exit_code == 2
    assert "this target is LlamaForCausalLM (model_type llama)" in one_error_line(result)


def test_a_method_it_does_not_model_is_one_line_naming_it(make_run: Callable[..., Path]) -> None:
    # Issue 38: the reference replays Gemma4 and DeepSeek MTP, a Llama draft model, EAGLE-1 and EAGLE-3 and n-gram
    # lookup; a Medusa run is refused before any model.
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(GOOD)}, baseline=None, method="medusa")
    result = invoke("reference", run)
    assert result.exit_code == 2
    expected = "speculative method 'medusa': the reference replays mtp, draft_model, eagle, eagle3, ngram"
    assert expected in one_error_line(result)


def test_show_holds_a_replayed_run_against_its_stored_reference(make_run: Callable[..., Path]) -> None:
    # Once `mtpbench reference` has stored a reference, `show` (and compare, report, the end of run) hold the
    # engine against it too: no baseline, and the finding rides in the JSON with its numbers.
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(WORSE)}, baseline=None)
    assert invoke("show", run).exit_code == 0  # nothing stored yet: no signature without a baseline
    write_reference(run, [CELL])
    result = invoke("show", run, "--json")
    assert result.exit_code == 1, result.output
    (f,) = [f for f in json.loads(result.stdout)["findings"] if f["kind"] == "engine-below-reference"]
    assert f["cell"] == CELL and f["numbers"]["positions"] == [0, 1, 2] and f["numbers"]["al"] is True


def test_reference_replay_in_a_sampled_config_is_refused_before_any_engine(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "name: t\nmodel: m\nspeculative: {method: mtp, model: d, num_speculative_tokens: 3}\n"
        "sampling: {temperature: 0.7}\nprompts: p.yaml\nreference_replay: true\n"
    )
    result = invoke("run", cfg)
    assert result.exit_code == 2
    assert "reference_replay: the reference replays greedy decoding" in one_error_line(result)


def test_a_manifest_config_that_no_longer_validates_names_its_key(make_run: Callable[..., Path]) -> None:
    # The refusal said pydantic's headline ("1 validation error for ExperimentConfig"), not which key.
    from mtpbench.fixtures import TINY_GEMMA4_ASSISTANT_DIR, TINY_GEMMA4_TARGET_DIR

    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(GOOD)}, baseline=None)
    _set_pair(run, TINY_GEMMA4_TARGET_DIR, TINY_GEMMA4_ASSISTANT_DIR)
    result = invoke("reference", run)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert f"{run / 'manifest.json'}: prompts: Field required (the manifest's config no longer validates)" in line


def test_a_suffix_run_that_drafted_with_another_arctic_inference_is_one_line(make_run: Callable[..., Path]) -> None:
    """The suffix rule mirrors arctic-inference 0.3.0's tree (its sibling order decides ties): a cell that
    drafted with another release is refused, not replayed into a finding the library's change would make."""
    from mtpbench.fixtures import TINY_GEMMA4_TARGET_DIR

    own = {"suffix_decoding_max_cached_requests": 0}
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(GOOD)}, baseline=None, method="suffix", extra=own)
    _set_pair(run, TINY_GEMMA4_TARGET_DIR, None)
    lines = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    for line in lines:
        if line.get("type") == "cell_start":
            line["env"] = {"versions": {"vllm": "0.32.0", "arctic_inference": "0.4.0"}}
    (run / "records.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = invoke("reference", run)
    assert result.exit_code == 2, result.output
    assert one_error_line(result).endswith(
        f"cell {CELL} drafted with arctic-inference 0.4.0; the reference mirrors 0.3.0's suffix tree "
        "(mtpbench/reference/suffix.py)"
    )


@pytest.mark.parametrize(
    ("method", "cause"),
    [("mtp", Cause.ENGINE_BELOW_WEIGHTS), ("ngram", Cause.LOOKUP_DRAFT), ("suffix", Cause.LOOKUP_DRAFT)],
)
def test_a_lookup_below_its_weights_points_at_the_lookup_not_a_drafter_model(
    make_run: Callable[..., Path], method: str, cause: Cause
) -> None:
    """No KV-cache groups, hidden states or chained draft steps to look into: a lookup method's finding names
    what a lookup has (the tokens it is handed, its settings, its library)."""
    run = make_run({CELL: [[0.0]]}, per_prompt={CELL: per_prompt(WORSE)}, baseline=None, method=method)
    write_reference(run, [CELL])
    comp = judge(load_run(run))
    below = [f for f in comp.diagnoses if f.kind == Kind.ENGINE_BELOW_REFERENCE]
    assert below and {f.cause for f in below} == {cause}
    result = invoke("reference", run, "--stored")
    assert ("the lookup proposer (n-gram, suffix decoding" in result.stdout) == (cause == Cause.LOOKUP_DRAFT)


@pytest.mark.parametrize(
    ("mode", "cached", "prompts", "refused"),
    [
        ("sequential", 10000, 5, None),
        ("sequential", 0, 5, None),
        ("batched", 0, 5, None),
        ("batched", 10000, 5, "ran its prompts batched: the cache then holds the requests as the scheduler"),
        ("sequential", 3, 5, "it keeps 3 outputs, fewer than the run's 5 prompts (its evictions are not modelled)"),
    ],
)
def test_a_suffix_cache_shared_across_requests_is_replayed_only_as_served_in_turn(
    make_run: Callable[..., Path], mode: str, cached: int, prompts: int, refused: str | None
) -> None:
    """vLLM's default suffix cache (10000 outputs) makes a request's drafts depend on the requests its process
    served before it: the reference replays that only for a process that served the prompts one at a time, in
    order, and kept every output."""
    from mtpbench.reference.compute import check_suffix_cache

    extra = {"suffix_decoding_max_cached_requests": cached}
    run_dir = make_run(
        {CELL: [[0.0]]}, per_prompt={CELL: per_prompt(GOOD)}, baseline=None, method="suffix", extra=extra
    )
    lines = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    for line in lines:
        if line.get("type") == "cell_start":
            line["prompt_mode"] = {"requested": mode, "effective": mode}
    (run_dir / "records.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if refused is None:
        check_suffix_cache(load_run(run_dir), prompts)
        return
    with pytest.raises(UserError) as err:
        check_suffix_cache(load_run(run_dir), prompts)
    assert refused in str(err.value) and "\n" not in str(err.value)
    assert f"suffix_decoding_max_cached_requests is {cached} (a cache shared across requests)" in str(err.value)
