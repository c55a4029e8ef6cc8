"""The shipped EAGLE-3 and EAGLE-1 configs (issue 38): they run the default config's prompts and sampling with
methods eagle3 and eagle on the tiny Llama target, each with its head."""

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


def test_the_eagle1_config_runs_the_same_prompts_with_method_eagle_and_its_head() -> None:
    cfg = load_config(REPO / "configs" / "tiny-llama-eagle.yaml")
    eagle3 = load_config(CONFIG)
    assert cfg.speculative.method == "eagle"
    assert (cfg.speculative.num_speculative_tokens, cfg.sampling) == (3, eagle3.sampling)
    assert config_prompts(cfg).sha256() == config_prompts(eagle3).sha256()
    assert cfg.model == eagle3.model and set(cfg.modes) == {"eager"}
    head = json.loads((Path(str(cfg.speculative.model)) / "config.json").read_text())
    assert head["architectures"] == ["LlamaForCausalLM"] and head["num_hidden_layers"] == 1
