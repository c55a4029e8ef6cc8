"""The EAGLE heads' trainers (mtpbench/training/eagle1.py and eagle3.py over heads.py) and the heads they ship
(mtpbench/fixtures/tiny_llama/eagle/ and eagle3/), one parametrized file for both.

A two-step run on a handful of corpus files must write what vLLM 0.32 loads, and the same bytes for the same
seed:
- EAGLE-1 (`eagle`): a one-layer Llama config, which vLLM runs as EagleLlamaForCausalLM; weights named `fc.*` and
  `layers.0.*` as llama_eagle.py loads them, with no input norm on layer 0, no final norm, and neither
  `embed_tokens` nor `lm_head`, so the target's are shared.
- EAGLE-3 (`eagle3`): a one-layer `LlamaForCausalLMEagle3` config naming its auxiliary layers; weights named as
  EAGLE-3 checkpoints name them, `midlayer.` for the layer, no `embed_tokens` so the target's are shared.

The shipped head's provenance must say how to rebuild it and from which target. No engine here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mtpbench.fixtures import FIXTURES_DIR  # noqa: E402
from mtpbench.training import eagle1, eagle3  # noqa: E402
from mtpbench.weights import weights_sha256  # noqa: E402

pytestmark = pytest.mark.slow

TARGET = FIXTURES_DIR / "tiny_llama" / "target"
TINY_ARGS = ["--steps", "2", "--batch", "2", "--rollouts", "2", "--prefix-max", "40", "--new-tokens", "8"]
TINY_ARGS += ["--max-files", "4", "--threads", "1", "-q"]
# The head's folder name (under the trainer's --out and under the fixtures) and its trainer's entry point.
TRAINERS: dict[str, Callable[[list[str]], int]] = {"eagle": eagle1.main, "eagle3": eagle3.main}
MODULES = {"eagle": "eagle1", "eagle3": "eagle3"}


def train(head: str, out: Path) -> Path:
    assert TRAINERS[head](["--target", str(TARGET), "--out", str(out), *TINY_ARGS]) == 0
    return out / head


@pytest.fixture(scope="module", params=sorted(TRAINERS))
def trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    head: str = request.param
    return head, train(head, tmp_path_factory.mktemp(head))


def test_the_head_is_written_as_vllm_loads_it(trained: tuple[str, Path]) -> None:
    from safetensors.torch import load_file

    head, folder = trained
    cfg: dict[str, Any] = json.loads((folder / "config.json").read_text())
    target = json.loads((TARGET / "config.json").read_text())
    weights = load_file(str(folder / "model.safetensors"))
    h = cfg["hidden_size"]
    assert cfg["num_hidden_layers"] == 1 and h == target["hidden_size"]
    assert "fc.weight" in weights
    assert not any("embed_tokens" in n for n in weights)  # vLLM then shares the target's embeddings
    if head == "eagle":
        assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
        assert "eagle_aux_hidden_state_layer_ids" not in cfg and cfg["vocab_size"] == target["vocab_size"]
        assert weights["fc.weight"].shape == (h, 2 * h)  # fc over [embeds, hidden]
        assert weights["layers.0.self_attn.q_proj.weight"].shape[1] == h  # the layer reads fc's output
        assert not any(n.startswith("lm_head") for n in weights)  # the target's is shared too
        assert not any("input_layernorm" in n or n.startswith("norm") for n in weights)  # vLLM's head has neither
    else:
        assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
        assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 2, 4]
        assert cfg["draft_vocab_size"] == cfg["vocab_size"] == 260
        assert "midlayer.hidden_norm.weight" in weights and "lm_head.weight" in weights
        assert weights["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * h  # the layer reads [embeds, hidden]


def test_same_seed_same_bytes(trained: tuple[str, Path], tmp_path: Path) -> None:
    head, folder = trained
    again = train(head, tmp_path)
    assert (again / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()


@pytest.mark.parametrize("head", sorted(TRAINERS))
def test_the_shipped_head_records_how_to_rebuild_it_from_the_shipped_target(head: str) -> None:
    shipped = FIXTURES_DIR / "tiny_llama" / head
    prov = json.loads((shipped / "provenance.json").read_text())
    module = MODULES[head]
    assert prov["command"].startswith(
        f"python -m mtpbench.training.{module} --target mtpbench/fixtures/tiny_llama/target"
    )
    assert prov["target"]["weights_sha256"] == weights_sha256(TARGET)
    assert prov["head"]["loss_end"] < prov["head"]["loss_start"]
    assert min(prov["offline_heldout_acceptance_per_pos"]) > 0.5
    assert (shipped / "model.safetensors").stat().st_size < 4_000_000
    if head == "eagle":
        assert prov["head"]["architecture"] == "EagleLlamaForCausalLM"
        assert prov["sizes_bytes"]["head"] == sum(
            p.stat().st_size for p in shipped.iterdir() if p.name != "provenance.json"
        )
    else:
        assert prov["head"]["aux_layer_ids"] == [1, 2, 4]
