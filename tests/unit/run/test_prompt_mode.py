"""The `prompt_mode` config key: batched (all prompts of a repeat at once) or sequential, passed to the
worker in its job. The engine side is tested in test_engine.py (batched, the default config) and
test_synthetic.py (sequential)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mtpbench.config import config_prompts, load_config, load_prompts
from mtpbench.errors import UserError
from mtpbench.run import runner

REPO = Path(__file__).resolve().parents[3]


def _write(tmp_path: Path, **changes: object) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "tiny-gemma4-mtp.yaml").read_text())
    cfg.update(changes)
    cfg["model"] = str(REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp" / "target")
    cfg["prompts"] = str(REPO / "prompts" / "coding.yaml")
    cfg["baseline"] = None
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("mode", ["batched", "sequential"])
def test_prompt_mode_reaches_the_workers_job(tmp_path: Path, mode: str) -> None:
    cfg = load_config(_write(tmp_path, prompt_mode=mode))
    plans = runner.cell_jobs(cfg, load_prompts(cfg.prompts), runner.expand(cfg), "T", "/dev/null")
    assert {pl.job["prompt_mode"] for pl in plans} == {mode}


def test_unknown_prompt_mode_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="prompt_mode"):
        load_config(_write(tmp_path, prompt_mode="parallel"))


def test_the_default_config_batches_its_sized_prompt_set() -> None:
    cfg = load_config(REPO / "configs" / "tiny-gemma4-mtp.yaml")
    assert cfg.prompt_mode == "batched"
    prompts = config_prompts(cfg)
    # The size the sizing asks for (issue 19: ~150 prompts certify a 5 % AL drop under bursty noise).
    assert len(prompts.prompts) >= 150
    # Byte-level tokenizer: one token per UTF-8 byte plus <bos>. Long contexts past the 64-token sliding
    # window are where a sliding/full attention mix-up bites; all must fit max_model_len with max_tokens.
    lengths = [len(p.text.encode()) + 1 for p in prompts.prompts]
    assert sum(n > 64 for n in lengths) >= 20
    assert max(lengths) + cfg.sampling.max_tokens <= cfg.engine_args["max_model_len"]
    assert len(load_prompts(REPO / "prompts" / "coding.yaml").prompts) == 5  # the seed's set stays
