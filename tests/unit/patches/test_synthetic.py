"""The `cpu-synthetic-rejection` patch: vLLM's synthetic rejection sampling on the CPU sampler.

Checked against the GPU kernels' definition: `_triton_greedy` and `_triton_random` below are line-by-line
transcriptions of `rejection_greedy_sample_kernel` (vllm/v1/sample/rejection_sampler.py:726-780, vLLM
v0.32.0) and `rejection_random_sample_kernel` (same file, 829-900) for SYNTHETIC_MODE=True, one program
per request. The conversion from configured (unconditional) to per-step (conditional) rates is vLLM's own
`unconditional_to_conditional_rates`, imported, not copied. The engine-backed tests at the end (marked
engine) run one eager cell of the tiny pair with synthetic acceptance and check that the measured rates
recover the configured ones within the reported interval.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("vllm", reason="the synthetic patch targets vLLM's CPU kernels")

from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates  # noqa: E402

from mtpbench.fixes.registry import apply_one  # noqa: E402
from mtpbench.patches.cpu.synthetic_rejection import accepted_prefix  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PAIR = REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp"
PLACEHOLDER = -1  # vllm.v1.sample.rejection_sampler.PLACEHOLDER_TOKEN_ID


def _triton_greedy(out, cu, draft, target_argmax, bonus, is_greedy, max_spec_len, uniform, rates) -> None:  # type: ignore[no-untyped-def]
    for req_idx in range(out.shape[0]):
        greedy = True if is_greedy is None else bool(is_greedy[req_idx])
        if not greedy:
            continue
        start_idx = 0 if req_idx == 0 else int(cu[req_idx - 1])
        end_idx = int(cu[req_idx])
        num_draft_tokens = end_idx - start_idx
        rejected = False
        for pos in range(num_draft_tokens):
            if not rejected:
                draft_token_id = int(draft[start_idx + pos])
                target_argmax_id = int(target_argmax[start_idx + pos])
                uniform_prob = float(uniform[start_idx + pos])
                rate = float(rates[pos])
                accepted = (uniform_prob < rate) and draft_token_id >= 0
                token_id = draft_token_id if accepted else target_argmax_id
                rejected = not accepted
                out[req_idx, pos] = token_id
        if not rejected:
            out[req_idx, num_draft_tokens] = int(bonus[req_idx])


def _triton_random(out, cu, draft, bonus, recovered, uniform, is_greedy, rates) -> None:  # type: ignore[no-untyped-def]
    for req_idx in range(out.shape[0]):
        if bool(is_greedy[req_idx]):
            continue
        start_idx = 0 if req_idx == 0 else int(cu[req_idx - 1])
        end_idx = int(cu[req_idx])
        num_draft_tokens = end_idx - start_idx
        rejected = False
        for pos in range(num_draft_tokens):
            if not rejected:
                draft_token_id = int(draft[start_idx + pos])
                uniform_prob = float(uniform[start_idx + pos])
                if draft_token_id < 0:
                    accepted = False
                else:
                    accepted = uniform_prob < float(rates[pos])
                if accepted:
                    token_id = draft_token_id
                else:
                    rejected = True
                    token_id = int(recovered[start_idx + pos])
                out[req_idx, pos] = token_id
        if not rejected:
            out[req_idx, num_draft_tokens] = int(bonus[req_idx])


def _batch(seed: int, k: int = 3, batch: int = 64) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n_draft = torch.randint(1, k + 1, (batch,), generator=g)  # ragged, as with finishing requests
    cu = torch.cumsum(n_draft, 0).to(torch.int32)
    tokens = int(cu[-1])
    draft = torch.randint(0, 50, (tokens,), generator=g, dtype=torch.int32)
    draft[torch.rand(tokens, generator=g) < 0.05] = -1  # vLLM's padded drafts
    return {
        "cu": cu,
        "draft": draft,
        "argmax": torch.randint(50, 100, (tokens,), generator=g),
        "recovered": torch.randint(100, 150, (tokens,), generator=g, dtype=torch.int32),
        "bonus": torch.randint(150, 200, (batch, 1), generator=g),
        "uniform": torch.rand(tokens, generator=g, dtype=torch.float64),
        "is_greedy": torch.rand(batch, generator=g) < 0.5,
        "out": torch.full((batch, k + 1), PLACEHOLDER, dtype=torch.int32),
    }


@pytest.fixture(scope="module")
def patched() -> object:
    outcome = apply_one("cpu-synthetic-rejection")
    assert outcome.status == "applied", outcome
    import vllm._custom_ops  # noqa: F401 - loads the C++ ops the stock CPU kernels call
    from vllm.utils import cpu_triton_utils

    return cpu_triton_utils


CONDITIONAL = torch.tensor(unconditional_to_conditional_rates([0.9, 0.7, 0.4]), dtype=torch.float32)


@pytest.mark.parametrize("seed", range(5))
def test_cpu_greedy_kernel_matches_the_triton_synthetic_rule(patched: object, seed: int) -> None:
    b = _batch(seed)
    mine, ref = b["out"].clone(), b["out"].clone()
    for is_greedy in (None, b["is_greedy"]):
        patched._rejection_greedy_sample_kernel_impl(  # type: ignore[attr-defined]
            mine,
            b["cu"],
            b["draft"],
            b["argmax"],
            b["bonus"],
            is_greedy,
            3,
            b["uniform"],
            CONDITIONAL,
            SYNTHETIC_MODE=True,
        )
        _triton_greedy(ref, b["cu"], b["draft"], b["argmax"], b["bonus"], is_greedy, 3, b["uniform"], CONDITIONAL)
        assert torch.equal(mine, ref)


@pytest.mark.parametrize("seed", range(5))
def test_cpu_random_kernel_matches_the_triton_synthetic_rule(patched: object, seed: int) -> None:
    b = _batch(seed)
    mine, ref = b["out"].clone(), b["out"].clone()
    vocab = 200
    probs = torch.full((len(b["draft"]), vocab), 1.0 / vocab)
    patched._rejection_random_sample_kernel_impl(  # type: ignore[attr-defined]
        mine,
        b["cu"],
        b["draft"],
        None,
        probs,
        b["bonus"],
        b["recovered"],
        b["uniform"],
        b["is_greedy"],
        3,
        vocab,
        CONDITIONAL,
        NO_DRAFT_PROBS=True,
        SYNTHETIC_MODE=True,
    )
    _triton_random(ref, b["cu"], b["draft"], b["bonus"], b["recovered"], b["uniform"], b["is_greedy"], CONDITIONAL)
    assert torch.equal(mine, ref)


def test_without_synthetic_mode_the_stock_cpu_kernel_runs(patched: object) -> None:
    """Stock greedy verification is untouched: the wrapper hands it to vLLM's C++ kernel."""
    b = _batch(7)
    b["argmax"][: len(b["draft"]) // 2] = b["draft"][: len(b["draft"]) // 2].to(torch.int64)
    out = b["out"].clone()
    patched._rejection_greedy_sample_kernel_impl(  # type: ignore[attr-defined]
        out, b["cu"], b["draft"], b["argmax"], b["bonus"], None, 3
    )
    ref = b["out"].clone()
    # Stock rule (rejection_sampler.py:764-766): accept while the draft equals the target's argmax.
    start = 0
    for req, end in enumerate(b["cu"].tolist()):
        n = 0
        while n < end - start and int(b["draft"][start + n]) == int(b["argmax"][start + n]):
            n += 1
        row = [int(x) for x in b["argmax"][start : start + min(n + 1, end - start)]]
        if n == end - start:
            row.append(int(b["bonus"][req]))
        ref[req, : len(row)] = torch.tensor(row, dtype=torch.int32)
        start = end
    assert torch.equal(out, ref)


def test_measured_unconditional_rates_are_the_configured_ones() -> None:
    """The chain of per-step rates reproduces the configured per-position unconditional rates."""
    configured = [0.9, 0.75, 0.6]
    conditional = unconditional_to_conditional_rates(configured)
    g = torch.Generator().manual_seed(0)
    n = 200_000
    uniforms = torch.rand((n, 3), generator=g, dtype=torch.float64).tolist()
    accepted = [0, 0, 0]
    for row in uniforms:
        for i in range(accepted_prefix([1, 1, 1], row, conditional)):
            accepted[i] += 1
    for i, p in enumerate(configured):
        se = (p * (1 - p) / n) ** 0.5
        assert abs(accepted[i] / n - p) < 5 * se, (i, accepted[i] / n, p)


def test_apply_is_idempotent(patched: object) -> None:
    first = patched._rejection_greedy_sample_kernel_impl  # type: ignore[attr-defined]
    assert apply_one("cpu-synthetic-rejection").status == "applied"
    assert patched._rejection_greedy_sample_kernel_impl is first  # type: ignore[attr-defined]


# --- through the real engine -------------------------------------------------------------------------

CONFIGURED = [0.8, 0.6, 0.4]


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One eager cell of the tiny pair with synthetic acceptance, the five-prompt set, one at a time (the
    default config's batched mode is exercised by test_engine.py)."""
    tmp = tmp_path_factory.mktemp("synthetic")
    cfg = yaml.safe_load((REPO / "configs" / "tiny-gemma4-mtp.yaml").read_text())
    cfg.update(
        model=str(PAIR / "target"),
        prompts=str(REPO / "prompts" / "coding.yaml"),
        baseline=None,
        repeats=1,
        hash_seeds=[0],
        prompt_mode="sequential",
        modes={"eager": {"enforce_eager": True}},
        variants={"synthetic": ["cpu-synthetic-rejection"]},
    )
    cfg["speculative"].update(
        model=str(PAIR / "assistant"),
        extra={"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": CONFIGURED},
    )
    path = tmp / "synthetic.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp / "runs"
    res = subprocess.run(
        [sys.executable, "-m", "mtpbench", "run", str(path), "--out", str(out), "--no-compare"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "MTPBENCH_WIDTH": "200"},
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if (p / "manifest.json").exists()]
    return run_dir


@pytest.mark.engine
def test_real_engine_recovers_the_configured_rates(synthetic_run: Path) -> None:
    from mtpbench.judge.evidence import collect
    from mtpbench.store.results import load_run

    run = load_run(synthetic_run)
    (cell,) = collect(run, confidence=0.99)
    assert cell.patches[0]["status"] == "applied"
    for i, truth in enumerate(CONFIGURED):
        ci = cell.summary.per_pos_ci[i]
        assert ci is not None and ci.low <= truth <= ci.high, (i, truth, ci, cell.summary.per_pos)
    # The stock pair accepts ~95 % at pos0 on these prompts: the rates seen are the configured ones.
    assert cell.summary.per_pos[0] is not None and cell.summary.per_pos[0] < 0.9


@pytest.mark.engine
def test_sequential_cell_counts_each_prompt_twice_and_records_its_vllm(synthetic_run: Path) -> None:
    """One-at-a-time prompts stay selectable: counter differences per prompt, and vLLM's per-request
    counts beside them agree exactly."""
    from mtpbench.store.results import load_run

    run = load_run(synthetic_run)
    (start,) = run.cell_starts()
    assert start["prompt_mode"] == {"requested": "sequential", "effective": "sequential"}
    import vllm

    assert start["imported_from"]["vllm"] == str(Path(vllm.__file__).resolve())
    prompts = [r for r in run.records if r["type"] == "prompt"]
    assert len(prompts) == 5 and all(r["source"] == "counters" for r in prompts)
    for r in prompts:
        assert r["per_request"] == {k: r[k] for k in r["per_request"]}, r
