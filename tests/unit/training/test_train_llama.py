"""The tiny Llama pair (issue 38, method draft_model): the trainer still runs and writes what vLLM's draft-model
path expects, reproducibly; and the shipped pair (mtpbench/fixtures/tiny_llama) is what its provenance says.

The trainer runs a couple of steps on a handful of corpus files into a temporary directory: target and draft
model must load with transformers as LlamaForCausalLM over the byte tokenizer, with the target's four layers
(vLLM's default EAGLE-3 auxiliary layers need them) and the smaller drafter; a fixed seed gives the same bytes,
and a drafter-only run on the saved target trains the very drafter a full run does. No vLLM engine here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtpbench.fixtures import TINY_GEMMA4_PROVENANCE, TINY_LLAMA_DIR, TINY_LLAMA_PROVENANCE

TINY_ARGS = ["--seed", "3", "--target-steps", "2", "--draft-steps", "2", "--rollouts", "2", "--max-files", "4"]
TINY_ARGS += ["--threads", "1", "-q"]


def test_the_shipped_pair_is_what_its_provenance_says() -> None:
    prov = json.loads(TINY_LLAMA_PROVENANCE.read_text())
    assert "mtpbench.training.train_llama" in prov["command"]
    # The same corpus as the Gemma4 pair: one byte stream, so the two targets learnt the same text.
    assert prov["corpus"]["sha256"] == json.loads(TINY_GEMMA4_PROVENANCE.read_text())["corpus"]["sha256"]
    assert prov["target"]["architecture"] == prov["drafter"]["architecture"] == "LlamaForCausalLM"
    # Trained for real: the loss fell well below the 5.56 nats of a uniform guess over 260 ids.
    trained_by = prov["target"].get("trained_by") or prov["target"]
    assert trained_by["loss_end"] < 2.0 and prov["drafter"]["loss_end"] < prov["drafter"]["loss_start"]
    for part, size in prov["sizes_bytes"].items():
        on_disk = sum(p.stat().st_size for p in (TINY_LLAMA_DIR / part).rglob("*") if p.is_file())
        assert on_disk == size, part
    target = json.loads((TINY_LLAMA_DIR / "target" / "config.json").read_text())
    draft = json.loads((TINY_LLAMA_DIR / "draft" / "config.json").read_text())
    assert (target["num_hidden_layers"], target["hidden_size"]) == (4, 192)
    assert (draft["num_hidden_layers"], draft["hidden_size"]) == (2, 128)
    assert target["vocab_size"] == draft["vocab_size"] == 260


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from mtpbench.training import train_llama

    out = tmp_path_factory.mktemp("llama-pair")
    assert train_llama.main(["--out", str(out), *TINY_ARGS]) == 0
    return out


@pytest.mark.slow
def test_target_and_draft_model_load_as_llamas_over_the_byte_tokenizer(trained: Path) -> None:
    import torch
    import transformers

    from mtpbench.training.tokenizer import BOS_ID, VOCAB_SIZE

    target = transformers.AutoModelForCausalLM.from_pretrained(trained / "target", dtype=torch.float32)
    draft = transformers.AutoModelForCausalLM.from_pretrained(trained / "draft", dtype=torch.float32)
    assert type(target).__name__ == type(draft).__name__ == "LlamaForCausalLM"
    assert (target.config.num_hidden_layers, target.config.num_key_value_heads) == (4, 2)
    assert (draft.config.num_hidden_layers, draft.config.hidden_size) == (2, 128)
    assert target.config.vocab_size == draft.config.vocab_size == VOCAB_SIZE
    tok = transformers.AutoTokenizer.from_pretrained(trained / "draft")
    assert tok("def f(").input_ids == [BOS_ID, *b"def f("]
    prov = json.loads((trained / "provenance.json").read_text())
    assert prov["seed"] == 3 and prov["target"]["steps"] == 2 and prov["drafter"]["steps"] == 2
    assert len(prov["offline_heldout_acceptance_per_pos"]) == 3


def assert_same_weights(a: Path, b: Path) -> None:
    for part in ("target", "draft"):
        assert (a / part / "model.safetensors").read_bytes() == (b / part / "model.safetensors").read_bytes(), part


@pytest.mark.slow
def test_a_drafter_only_run_on_the_saved_target_trains_the_full_runs_drafter(trained: Path, tmp_path: Path) -> None:
    from mtpbench.training import train_llama

    assert train_llama.main(["--out", str(tmp_path), "--target", str(trained / "target"), *TINY_ARGS]) == 0
    assert_same_weights(trained, tmp_path)
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov["target"]["reused_from"] == str(trained / "target")
    assert prov["target"]["trained_by"]["steps"] == 2


@pytest.mark.slow
def test_a_second_drafter_only_run_still_names_the_run_that_trained_the_target(trained: Path, tmp_path: Path) -> None:
    from mtpbench.training import train_llama

    first, second = tmp_path / "first", tmp_path / "second"
    assert train_llama.main(["--out", str(first), "--target", str(trained / "target"), *TINY_ARGS]) == 0
    assert train_llama.main(["--out", str(second), "--target", str(first / "target"), *TINY_ARGS]) == 0
    trained_by = json.loads((second / "provenance.json").read_text())["target"]["trained_by"]
    assert " --target " not in trained_by["command"] and trained_by["steps"] == 2
