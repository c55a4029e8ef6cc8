"""The context sweep's config and job (issue 31 part 3, workload.context): the shipped config expands every
prompt once per bucket (`<id>@ctx<tokens>`, fractions of max_model_len) under an identity that names the
context; bad fractions and contexts that cannot fit max_model_len are one line and exit 2 (a UserError);
the worker's job carries the shared text; engine/context.py builds each prompt's token ids behind its
bucket's context tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mtpbench.config import config_prompts, load_config
from mtpbench.engine.context import context_ids, with_context
from mtpbench.errors import UserError
from mtpbench.run import runner
from mtpbench.specs import split_context_id

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "configs" / "tiny-gemma4-mtp-context.yaml"


def _write(tmp_path: Path, context: dict[str, Any] | None = None, **changes: Any) -> Path:
    cfg = yaml.safe_load(SHIPPED.read_text())
    cfg["model"] = str(REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp" / "target")
    cfg["speculative"]["model"] = str(REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp" / "assistant")
    cfg["prompts"] = str(REPO / "prompts" / "coding-40.yaml")
    cfg["workload"]["context"]["source"] = str(REPO / "prompts" / "humaneval.yaml")
    cfg["workload"]["context"].update(context or {})
    cfg.update(changes)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_the_shipped_sweep_runs_every_prompt_once_per_bucket() -> None:
    cfg = load_config(SHIPPED)
    ps = config_prompts(cfg)
    buckets = sorted({split_context_id(p.id)[1] for p in ps.prompts})  # type: ignore[index]
    assert buckets == [0, 256, 512, 768]  # 0, 1/4, 1/2, 3/4 of max_model_len 1024
    assert len(ps.prompts) == 4 * 16
    assert all(p.context_tokens == split_context_id(p.id)[1] for p in ps.prompts)  # type: ignore[index]
    # Every bucket fits: context + the prompt's bytes (+<bos>) + max_tokens <= max_model_len.
    assert max(p.context_tokens + len(p.text.encode()) + 1 for p in ps.prompts) + 96 <= 1024  # type: ignore[operator]


def test_the_context_is_part_of_the_prompt_identity(tmp_path: Path) -> None:
    # Same prompts, same buckets, another shared text: another identity (a baseline of one cannot judge the other).
    swept = config_prompts(load_config(_write(tmp_path)))
    other = config_prompts(load_config(_write(tmp_path, {"source": str(REPO / "prompts" / "coding.yaml")})))
    assert swept.context_sha256 is not None and swept.sha256() != other.sha256()


@pytest.mark.parametrize(
    ("fractions", "words"),
    [
        ([0.0, 1.0], "outside [0, 1)"),
        ([0.0, -0.25], "outside [0, 1)"),
        ([0.5, 0.25], "must increase"),
        ([0.25, 0.25], "must increase"),
        ([0.5], "at least 2"),
    ],
)
def test_bad_bucket_fractions_are_one_line_of_bad_input(tmp_path: Path, fractions: list[float], words: str) -> None:
    with pytest.raises(UserError, match=r"workload\.offline\.context\.fractions") as err:
        load_config(_write(tmp_path, {"fractions": fractions}))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_context_that_cannot_fit_max_model_len_is_one_line_of_bad_input(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, {"fractions": [0.0, 0.9]}))
    with pytest.raises(UserError) as err:
        config_prompts(cfg)
    msg = str(err.value)
    assert "\n" not in msg and "921 tokens" in msg and "exceed max_model_len 1024" in msg


def test_a_sweep_needs_max_model_len(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, engine_args={"dtype": "float32"}))
    with pytest.raises(UserError, match=r"needs engine_args\.max_model_len"):
        config_prompts(cfg)


def test_the_workers_job_carries_the_shared_text_and_each_prompts_bucket() -> None:
    cfg = load_config(SHIPPED)
    ps = config_prompts(cfg)
    plans = runner.cell_jobs(cfg, ps, runner.expand(cfg), "T", "/dev/null")
    job = plans[0].job
    assert job["context_text"].startswith("from typing import List")  # HumanEval's first prompt
    assert {p["context_tokens"] for p in job["prompts"]} == {0, 256, 512, 768}


class ByteTokenizer:
    """The tiny pair's tokenizer in miniature (byte-level, <bos> = 2 in front), as engine/context.py uses it."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return ([2] if add_special_tokens else []) + [b + 10 for b in text.encode()]


def test_each_prompt_runs_behind_exactly_its_buckets_context_tokens() -> None:
    tok = ByteTokenizer()
    prompts = [
        {"id": "a@ctx0", "text": "xy", "context_tokens": 0},
        {"id": "a@ctx5", "text": "xy", "context_tokens": 5},
        {"id": "plain", "text": "xy"},
    ]
    out = with_context(tok, prompts, "abc")
    x, y = ord("x") + 10, ord("y") + 10
    a, b, c = (ord(ch) + 10 for ch in "abc")
    assert out[0]["input"] == {"prompt_token_ids": [2, x, y]}
    # The start token first, then 5 context tokens (the short text repeated), then the prompt.
    assert out[1]["input"] == {"prompt_token_ids": [2, a, b, c, a, b, x, y]}
    assert "input" not in out[2]
    assert context_ids(tok, "abc", 0) == []
