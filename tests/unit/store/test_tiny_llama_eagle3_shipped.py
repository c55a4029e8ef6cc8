"""The shipped EAGLE-3 config and baseline (issue 38): the config runs the default config's prompts and
sampling with method eagle3 on the tiny Llama pair, and the baseline it is judged by loads and was measured on
exactly those weights and prompts."""

from __future__ import annotations

import json
from pathlib import Path

from mtpbench.config import config_prompts, load_config
from mtpbench.store.baseline import load_baseline
from mtpbench.weights import weights_sha256

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


def test_the_eagle3_baseline_was_measured_on_the_shipped_weights_and_prompts() -> None:
    cfg = load_config(CONFIG)
    assert cfg.baseline is not None
    base = load_baseline(cfg.baseline)
    fp = base.fingerprint
    assert fp.method == "eagle3" and fp.num_speculative_tokens == 3
    assert fp.model_weights_sha256 == weights_sha256(REPO / "mtpbench/fixtures/tiny_llama/target")
    assert fp.drafter_weights_sha256 == weights_sha256(REPO / "mtpbench/fixtures/tiny_llama/eagle3")
    assert fp.prompts_sha256 == config_prompts(cfg).sha256()
    (entry,) = base.entries
    assert entry.mode == "eager"
    assert entry.counts is not None
    assert entry.rates_pct == [
        round(100 * a / entry.counts.num_drafts, 3) for a in entry.counts.accepted_per_pos
    ]
