"""The shipped draft_model config (configs/tiny-llama-draft-model.yaml, issue 38) and its baseline: the embedded
Llama pair, the default config's prompts and sampling, and a baseline measured on that very pair and prompt set."""

from __future__ import annotations

from pathlib import Path

from mtpbench.config import config_prompts, load_config
from mtpbench.fixtures import TINY_LLAMA_DRAFT_DIR, TINY_LLAMA_TARGET_DIR
from mtpbench.store.baseline import load_baseline

REPO = Path(__file__).resolve().parents[3]
CONFIG = REPO / "configs" / "tiny-llama-draft-model.yaml"
DEFAULT = REPO / "configs" / "tiny-gemma4-mtp-humaneval.yaml"


def test_the_draft_model_config_runs_the_embedded_llama_pair_on_the_default_prompts() -> None:
    cfg = load_config(CONFIG)
    default = load_config(DEFAULT)
    assert cfg.speculative.method == "draft_model"
    assert Path(str(cfg.model)).resolve() == TINY_LLAMA_TARGET_DIR
    assert Path(str(cfg.speculative.model)).resolve() == TINY_LLAMA_DRAFT_DIR
    assert cfg.speculative.num_speculative_tokens == default.speculative.num_speculative_tokens == 3
    assert cfg.sampling == default.sampling and cfg.sampling.temperature == 0.0
    assert config_prompts(cfg).sha256() == config_prompts(default).sha256()
    assert cfg.prompt_mode == default.prompt_mode == "batched"
    assert [m.enforce_eager for m in cfg.modes.values()] == [True]


def test_the_draft_model_baseline_was_measured_on_that_config() -> None:
    cfg = load_config(CONFIG)
    base = load_baseline(str(cfg.baseline))
    fp = base.fingerprint
    assert (fp.method, fp.num_speculative_tokens) == ("draft_model", 3)
    assert fp.prompts_sha256 == config_prompts(cfg).sha256()
    assert fp.sampling["temperature"] == 0.0 and fp.sampling["max_tokens"] == 128
    assert base.provenance.run_id and "tiny-llama-draft-model" in base.provenance.run_id
    (entry,) = base.entries
    assert entry.mode == "eager" and entry.counts is not None and entry.counts.num_drafts > 0
    # The draft model earns its keep (issue 38 asks 80 % at pos0; random weights give ~0): the bar and the
    # weights behind it are held for every Llama method in tests/unit/store/test_tiny_llama_baselines.py.
    assert entry.rates_pct[0] >= 80.0
