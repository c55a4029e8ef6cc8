"""The shipped configs of every speculative method (issue 38), each broken the way a hand edit breaks it,
through `run --dry-run`: one line on stderr naming the file and the key, exit 2, nothing written. Each of
these reached vLLM before and failed there, minutes later, as a failed run (exit 3) or not at all."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from mtpbench.cli import app

REPO = Path(__file__).resolve().parents[2]


def drop_drafter(spec: dict[str, Any]) -> None:
    del spec["model"]


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("tiny-llama-draft-model", drop_drafter, "speculative: model: method 'draft_model' drafts with its own model"),
    ("tiny-llama-eagle3", lambda s: s.update(method="eagle-3"), "'eagle-3' is not a method vLLM knows"),
    ("tiny-deepseek-mtp", lambda s: s.update(num_speculative_tokens=[1, 3, 3]), "duplicate k in [1, 3, 3]"),
    (
        "tiny-gemma4-ngram",
        lambda s: s["extra"].update(prompt_lookup_min=6),
        "prompt_lookup_min 6 is larger than prompt_lookup_max 5",
    ),
    (
        "tiny-gemma4-suffix",
        lambda s: s["extra"].update(suffix_decoding_max_tree_depth=0),
        "extra.suffix_decoding_max_tree_depth: expected an integer >= 1, got 0",
    ),
    (
        "tiny-gemma4-suffix",
        lambda s: s["extra"].update(suffix_decoding_min_token_prob=1.5),
        "extra.suffix_decoding_min_token_prob: a probability in [0, 1], got 1.5",
    ),
    (
        "tiny-gemma4-ngram",
        lambda s: s["extra"].update(suffix_decoding_max_cached_requests=0),
        "extra.suffix_decoding_max_cached_requests: a suffix decoding setting, but method is 'ngram'",
    ),
    (
        "tiny-gemma4-ngram-releases",
        lambda s: s["extra"].update(prompt_lookup_max=0),
        "extra.prompt_lookup_max: expected an integer in 1..65536, got 0",
    ),
]


@pytest.mark.parametrize(("name", "edit", "needle"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_broken_method_config_is_one_line_and_exit_2(
    name: str, edit: Callable[[dict[str, Any]], None], needle: str, tmp_path: Path
) -> None:
    text = (REPO / "configs" / f"{name}.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text.replace("../", f"{REPO}/"))
    edit(data["speculative"])
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    res = CliRunner().invoke(app, ["run", str(path), "--dry-run", "--out", str(tmp_path / "runs")])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"mtpbench: error: {path}: speculative"), res.stderr
    assert needle in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no run folder, nothing half-written


FUTURE_SPECULATIVE_PY = """
MTPModelTypes = Literal[
    "deepseek_mtp",
    "future_mtp",
]
EagleModelTypes = Literal["eagle", "eagle3", MTPModelTypes]
SpeculativeMethod = Literal[
    "ngram",
    "suffix",
    "tree_lookup",
    EagleModelTypes,
]
RejectionSampleMethod = Literal["standard", "synthetic"]
"""


def test_the_method_names_a_vllm_declares_are_read_from_its_source() -> None:
    from mtpbench.specs import declared_methods

    expected = {"deepseek_mtp", "future_mtp", "eagle", "eagle3", "ngram", "suffix", "tree_lookup"}
    assert declared_methods(FUTURE_SPECULATIVE_PY) == expected  # not the rejection sampler's names


def test_the_installed_vllm_declares_exactly_the_methods_mtpbench_lists() -> None:
    # The static list is vLLM 0.32's: the installed release's source says the same (read, not imported).
    pytest.importorskip("vllm")
    from mtpbench.specs import VLLM_METHODS, installed_vllm_methods

    assert installed_vllm_methods() == frozenset(VLLM_METHODS)


def test_a_method_only_a_later_vllm_knows_is_a_config_away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A release after 0.32 that adds a method: installed beside mtpbench, its new name validates, while a name
    neither knows is still one line (exit 2)."""
    from mtpbench import specs

    monkeypatch.setattr(specs, "installed_vllm_methods", lambda: specs.declared_methods(FUTURE_SPECULATIVE_PY))
    text = (REPO / "configs" / "tiny-gemma4-ngram.yaml").read_text(encoding="utf-8")
    for method, code in (("tree_lookup", 0), ("tree_lookupp", 2)):
        data = yaml.safe_load(text.replace("../", f"{REPO}/"))
        data["speculative"] = {"method": method, "num_speculative_tokens": 3}
        data.pop("baseline")  # the n-gram baseline judges n-gram only
        path = tmp_path / f"{method}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        res = CliRunner().invoke(app, ["run", str(path), "--dry-run", "--out", str(tmp_path / "runs")])
        assert res.exit_code == code, res.output
    assert "'tree_lookupp' is not a method vLLM knows (did you mean 'tree_lookup'?" in res.stderr
