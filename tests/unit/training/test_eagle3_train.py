"""The EAGLE-3 trainer (mtpbench/training/eagle3.py) and the head it ships (mtpbench/fixtures/tiny_llama/eagle3/).

A two-step run on a handful of corpus files must write what vLLM 0.32's eagle3 loads (a one-layer
`LlamaForCausalLMEagle3` config naming its auxiliary layers; weights named as EAGLE-3 checkpoints name them,
`midlayer.` for the layer, no `embed_tokens` so the target's are shared) and the same bytes for the same
seed. The shipped head's provenance must say how to rebuild it and from which target. No engine here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mtpbench.fixtures import FIXTURES_DIR  # noqa: E402
from mtpbench.training import eagle3  # noqa: E402
from mtpbench.weights import weights_sha256  # noqa: E402

pytestmark = pytest.mark.slow

TARGET = FIXTURES_DIR / "tiny_llama" / "target"
SHIPPED = FIXTURES_DIR / "tiny_llama" / "eagle3"
TINY_ARGS = ["--steps", "2", "--batch", "2", "--rollouts", "2", "--prefix-max", "40", "--new-tokens", "8"]
TINY_ARGS += ["--max-files", "4", "--threads", "1", "-q"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("eagle3")
    assert eagle3.main(["--target", str(TARGET), "--out", str(out), *TINY_ARGS]) == 0
    return out / "eagle3"


def test_the_head_is_written_as_vllm_loads_an_eagle3_draft(trained: Path) -> None:
    from safetensors.torch import load_file

    cfg = json.loads((trained / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["num_hidden_layers"] == 1
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 2, 4]
    assert cfg["draft_vocab_size"] == cfg["vocab_size"] == 260
    names = set(load_file(str(trained / "model.safetensors")))
    assert "fc.weight" in names and "midlayer.hidden_norm.weight" in names and "lm_head.weight" in names
    assert not any("embed_tokens" in n for n in names)  # vLLM then shares the target's embeddings
    h = cfg["hidden_size"]
    q = load_file(str(trained / "model.safetensors"))["midlayer.self_attn.q_proj.weight"]
    assert q.shape[1] == 2 * h  # the first layer reads [embeds, hidden]


def test_same_seed_same_bytes(trained: Path, tmp_path: Path) -> None:
    assert eagle3.main(["--target", str(TARGET), "--out", str(tmp_path), *TINY_ARGS]) == 0
    assert (tmp_path / "eagle3" / "model.safetensors").read_bytes() == (trained / "model.safetensors").read_bytes()


def test_the_shipped_head_records_how_to_rebuild_it_from_the_shipped_target() -> None:
    prov = json.loads((SHIPPED / "provenance.json").read_text())
    assert prov["command"].startswith("python -m mtpbench.training.eagle3 --target mtpbench/fixtures/tiny_llama/target")
    assert prov["target"]["weights_sha256"] == weights_sha256(TARGET)
    assert prov["head"]["aux_layer_ids"] == [1, 2, 4]
    assert prov["head"]["loss_end"] < prov["head"]["loss_start"]
    assert min(prov["offline_heldout_acceptance_per_pos"]) > 0.5
    assert (SHIPPED / "model.safetensors").stat().st_size < 4_000_000
