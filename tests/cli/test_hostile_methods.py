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
