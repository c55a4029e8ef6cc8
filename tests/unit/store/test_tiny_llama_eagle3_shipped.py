"""The shipped EAGLE-3 config (issue 38): it runs the default config's prompts and sampling with method
eagle3 on the tiny Llama pair."""

from __future__ import annotations

import json
from pathlib import Path

from mtpbench.config import config_prompts, load_config

REPO = Path(__file__).resolve().parents[3]
CONFIG = REPO / "configs" / "tiny-llama-eagle3.yaml"


def test_the_eagle3_config_runs_the_default_prompts_on_the_tiny_llama_pair() -> None:
    cfg = load_config(CONFIG)
    default = load_config(REPO / "configs" / "tiny-gemma4-mtp-humaneval.yaml")
    assert cfg.speculative.method == "eagle3"
    assert cfg.speculative.num_speculative_tokens == 3
    assert cfg.sampling == default.sampling
    assert config_prompts(cfg).sha256() == config_prompts(default).sha256()
    head = json.loads((Path(str(cfg.speculative.model)) / "config.json").read_text())
    assert head["architectures"] == ["LlamaForCausalLMEagle3"]
    assert set(cfg.modes) == {"eager"}
