"""The EAGLE-1 trainer (mtpbench/training/eagle1.py over heads.py) and the head it ships
(mtpbench/fixtures/tiny_llama/eagle/).

A two-step run on a handful of corpus files must write what vLLM 0.32's `eagle` method loads (a one-layer Llama
config, which vLLM runs as EagleLlamaForCausalLM; weights named `fc.*` and `layers.0.*` as llama_eagle.py loads
them, with no input norm on layer 0, no final norm, and neither `embed_tokens` nor `lm_head`, so the target's are
shared) and the same bytes for the same seed. The shipped head's provenance must say how to rebuild it and from
which target. No engine here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mtpbench.fixtures import FIXTURES_DIR  # noqa: E402
from mtpbench.training import eagle1  # noqa: E402
from mtpbench.weights import weights_sha256  # noqa: E402

pytestmark = pytest.mark.slow

TARGET = FIXTURES_DIR / "tiny_llama" / "target"
SHIPPED = FIXTURES_DIR / "tiny_llama" / "eagle"
TINY_ARGS = ["--steps", "2", "--batch", "2", "--rollouts", "2", "--prefix-max", "40", "--new-tokens", "8"]
TINY_ARGS += ["--max-files", "4", "--threads", "1", "-q"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("eagle1")
    assert eagle1.main(["--target", str(TARGET), "--out", str(out), *TINY_ARGS]) == 0
    return out / "eagle"


def test_the_head_is_written_as_vllm_loads_an_eagle_draft(trained: Path) -> None:
    from safetensors.torch import load_file

    cfg = json.loads((trained / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert cfg["num_hidden_layers"] == 1 and "eagle_aux_hidden_state_layer_ids" not in cfg
    target = json.loads((TARGET / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["vocab_size"]) == (target["hidden_size"], target["vocab_size"])
    weights = load_file(str(trained / "model.safetensors"))
    h = cfg["hidden_size"]
    assert weights["fc.weight"].shape == (h, 2 * h)  # fc over [embeds, hidden]
    assert weights["layers.0.self_attn.q_proj.weight"].shape[1] == h  # the layer reads fc's output
    assert not any(n.startswith("lm_head") or "embed_tokens" in n for n in weights)  # the target's are shared
    assert not any("input_layernorm" in n or n.startswith("norm") for n in weights)  # vLLM's head has neither


def test_same_seed_same_bytes(trained: Path, tmp_path: Path) -> None:
    assert eagle1.main(["--target", str(TARGET), "--out", str(tmp_path), *TINY_ARGS]) == 0
    assert (tmp_path / "eagle" / "model.safetensors").read_bytes() == (trained / "model.safetensors").read_bytes()


def test_the_shipped_head_records_how_to_rebuild_it_from_the_shipped_target() -> None:
    prov = json.loads((SHIPPED / "provenance.json").read_text())
    assert prov["command"].startswith("python -m mtpbench.training.eagle1 --target mtpbench/fixtures/tiny_llama/target")
    assert prov["target"]["weights_sha256"] == weights_sha256(TARGET)
    assert prov["head"]["architecture"] == "EagleLlamaForCausalLM"
    assert prov["head"]["loss_end"] < prov["head"]["loss_start"]
    assert min(prov["offline_heldout_acceptance_per_pos"]) > 0.5
    assert (SHIPPED / "model.safetensors").stat().st_size < 4_000_000
    assert prov["sizes_bytes"]["head"] == sum(
        p.stat().st_size for p in SHIPPED.iterdir() if p.name != "provenance.json"
    )
