"""Fast checks that the tiny-pair trainer still runs and still writes what vLLM's Gemma4 MTP path expects.

The trainer runs for a couple of steps on a handful of corpus files into a temporary directory; the saved pair
must load with transformers, carry the shipped architecture (the target's sliding + full layers, the
drafter's KV-shared layers and backbone width), round-trip bytes through its tokenizer, and be reproducible
for a fixed seed. One more check pins the draft semantics: a draft from position p must not see tokens after
p+j. No vLLM engine is started here; the engine-level acceptance tests live elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mtpbench.training import drafting, recipe, train  # noqa: E402
from mtpbench.training.tokenizer import BOS_ID, VOCAB_SIZE  # noqa: E402

# Loads transformers and trains/loads the tiny pair (seconds to tens of seconds).
pytestmark = pytest.mark.slow

TINY_ARGS = [
    "--seed",
    "3",
    "--target-steps",
    "2",
    "--target-batch",
    "2",
    "--draft-steps",
    "2",
    "--draft-batch",
    "2",
    "--rollouts",
    "2",
    "--seq-len",
    "48",
    "--max-files",
    "4",
    "--draft-rollout-fraction",
    "0.5",  # exercise the corpus half of a drafter batch too
    "--threads",
    "1",  # tiny ops: a second thread only adds synchronisation
    "-q",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pair")
    assert train.main(["--out", str(out), *TINY_ARGS]) == 0
    return out


def test_target_loads_with_the_shipped_architecture(trained: Path) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(trained / "target", dtype=torch.float32)
    cfg = model.config
    assert type(model).__name__ == "Gemma4ForCausalLM"
    assert cfg.architectures == ["Gemma4ForCausalLM"]
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size) == (VOCAB_SIZE, 192, 768)
    assert cfg.layer_types == ["sliding_attention"] * 4 + ["full_attention"]
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.sliding_window) == (4, 2, 64)
    # The full-attention head dim defaults to 512 unless set; both types must be 32.
    assert [cfg.per_layer_config[i].head_dim for i in range(5)] == [32] * 5
    assert (cfg.vocab_size_per_layer_input, cfg.hidden_size_per_layer_input) == (0, 0)
    assert cfg.tie_word_embeddings
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[BOS_ID, *b"def f("]])).logits
    assert logits.shape == (1, 7, VOCAB_SIZE)
    assert torch.isfinite(logits).all()


def test_assistant_loads_as_a_kv_shared_drafter(trained: Path) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(trained / "assistant", dtype=torch.float32)
    cfg = model.config
    text = cfg.get_text_config()
    assert type(model).__name__ == "Gemma4AssistantForCausalLM"
    assert cfg.model_type == "gemma4_assistant"
    assert cfg.backbone_hidden_size == 192
    assert (text.hidden_size, text.num_hidden_layers) == (128, 4)
    # A full-attention layer first (see DrafterShape) and last, as Gemma4 requires.
    assert text.layer_types == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    # Every drafter layer reads the target's cache: queries only, with the target's KV head layout.
    assert text.num_kv_shared_layers == text.num_hidden_layers
    assert text.num_key_value_heads == 2
    assert [text.per_layer_config[i].head_dim for i in range(4)] == [32] * 4
    assert all(not hasattr(layer.self_attn, "k_proj") for layer in model.model.layers)
    assert model.pre_projection.weight.shape == (128, 2 * 192)
    assert model.post_projection.weight.shape == (192, 128)


def test_tokenizer_is_bytes_plus_bos(trained: Path) -> None:
    tok = transformers.AutoTokenizer.from_pretrained(trained / "target")
    text = 'def f(x):\n\treturn "héllo"\n'
    ids = tok(text).input_ids
    assert ids == [BOS_ID, *text.encode()]
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert len(tok) == VOCAB_SIZE


def test_provenance_records_the_run(trained: Path) -> None:
    prov = json.loads((trained / "provenance.json").read_text())
    assert prov["seed"] == 3
    assert "mtpbench.training.train" in prov["command"]
    assert prov["target"]["steps"] == 2 and prov["drafter"]["steps"] == 2
    assert prov["target"]["loss_start"] > 0 and prov["drafter"]["loss_end"] >= 0
    assert prov["corpus"]["num_files"] == 4 and len(prov["corpus"]["sha256"]) == 64
    assert prov["versions"]["torch"]
    assert len(prov["offline_heldout_acceptance_per_pos"]) == 3
    assert {k: len(v) for k, v in prov["offline_heldout_fault_acceptance_per_pos"].items()} == {
        "sliding_first": 3,
        "full_first": 3,
    }


def assert_same_weights(a: Path, b: Path) -> None:
    for part in ("target", "assistant"):
        assert (a / part / "model.safetensors").read_bytes() == (b / part / "model.safetensors").read_bytes(), part


def test_same_seed_same_weights(trained: Path, tmp_path: Path) -> None:
    assert train.main(["--out", str(tmp_path), *TINY_ARGS]) == 0
    assert_same_weights(trained, tmp_path)


def test_drafter_only_run_on_a_saved_target_matches_the_full_run(trained: Path, tmp_path: Path) -> None:
    # --target skips the target phase; the drafter phase has its own seeds, so it must train the same drafter.
    assert train.main(["--out", str(tmp_path), "--target", str(trained / "target"), *TINY_ARGS]) == 0
    assert_same_weights(trained, tmp_path)
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov["target"]["reused_from"] == str(trained / "target")
    assert prov["target"]["trained_by"]["steps"] == 2
    assert " --target " not in prov["target"]["trained_by"]["command"]  # the full run trained it


def test_drafter_only_run_refuses_a_folder_without_a_target(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--target .*: no config\.json"):
        train.main(["--out", str(tmp_path), "--target", str(tmp_path), *TINY_ARGS])


@pytest.fixture
def one_thread() -> Iterator[None]:
    # Tiny models: a second thread only adds synchronisation, which is slow on a busy box.
    with recipe._torch_threads(1):
        yield


@pytest.mark.usefixtures("one_thread")
def test_draft_from_p_ignores_tokens_after_p_plus_j() -> None:
    settings = recipe.TrainSettings(seed=0)
    torch.manual_seed(0)
    target = recipe.build_target(settings).eval()
    assistant = recipe.build_assistant(target, settings).eval()
    ids = torch.randint(0, 256, (1, 40))
    changed = ids.clone()
    changed[0, 20:] = (changed[0, 20:] + 1) % 256
    with torch.no_grad():
        a = drafting.draft_chain(target, assistant, ids, drafting.target_features(target, ids), 3)
        b = drafting.draft_chain(target, assistant, changed, drafting.target_features(target, changed), 3)
    for j in range(1, 4):
        # Step j from p reads tokens up to p+j, so positions p < 20 - j are untouched by the change.
        keep = 20 - j
        torch.testing.assert_close(a[j - 1][:, :keep], b[j - 1][:, :keep])
        assert not torch.allclose(a[j - 1][:, keep:], b[j - 1][:, keep:])
