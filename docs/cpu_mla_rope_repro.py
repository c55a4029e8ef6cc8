"""Minimal reproduction: vLLM-CPU's rotary op mis-rotates MLA's [tokens, heads, rope] views (docs/methods.md,
"DeepSeek MTP"), so a DeepSeek-V3 with a `default` rope writes a greedy text that depends on the batch and,
with MTP, on its own drafts. Raw vLLM API only (no mtpbench); the tiny target in mtpbench/fixtures:

    .venv/bin/python docs/cpu_mla_rope_repro.py --op          # the op alone against vLLM's forward_static
    .venv/bin/python docs/cpu_mla_rope_repro.py --k 0         # greedy text, batched vs one prompt at a time
    .venv/bin/python docs/cpu_mla_rope_repro.py --k 3         # the same with MTP drafts (compare with --k 0)
    .venv/bin/python docs/cpu_mla_rope_repro.py --k 3 --fix   # 3-D views rotated by forward_native instead
"""

import argparse
import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
TARGET = os.path.join(os.path.dirname(__file__), "..", "mtpbench", "fixtures", "tiny_deepseek_mtp", "target")
PROMPTS = ["def fib(n):\n    ", "import math\n\n\ndef area(r):\n    return", "class Stack:\n    def push(self, x):"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", action="store_true")
    ap.add_argument("--k", type=int, default=0)
    ap.add_argument("--fix", action="store_true")
    args = ap.parse_args()
    import torch
    from vllm import LLM, SamplingParams
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding as Rope

    if args.op:  # MLA's views: q[..., 32:] of [tokens, 4 heads, 96] and k_pe = latent[:, 512:].unsqueeze(1)
        positions, cache = torch.arange(6) * 7 + 3, torch.randn(64, 64)
        q, latent = torch.randn(6, 4, 96), torch.randn(6, 576)
        want, _ = Rope.forward_static(positions, q[..., 32:].clone(), None, 64, 64, cache, False)
        ops.rotary_embedding(positions, q[..., 32:], latent[:, 512:].unsqueeze(1), 64, cache, False)
        print("query heads rotated right (token x head):\n", (q[..., 32:] - want).abs().amax(-1) < 1e-5)
        return
    if args.fix:  # vLLM's own torch rotation for any layout the op does not read right

        def forward_cpu(self, positions, query, key=None):  # type: ignore[no-untyped-def]
            rotated_query, rotated_key = self.forward_native(positions, query, key)
            query.copy_(rotated_query)
            return query, key if key is None else key.copy_(rotated_key)

        Rope.forward_cpu = forward_cpu
    spec = {"method": "mtp", "model": TARGET, "num_speculative_tokens": args.k} if args.k else None
    llm = LLM(TARGET, speculative_config=spec, enforce_eager=True, dtype="float32", max_model_len=1024, seed=0,
              kv_cache_memory_bytes=268435456)  # fmt: skip
    greedy = SamplingParams(temperature=0.0, max_tokens=48)
    batched = [o.outputs[0].text for o in llm.generate(PROMPTS, greedy)]
    alone = [llm.generate([p], greedy)[0].outputs[0].text for p in PROMPTS]
    for prompt, b, a in zip(PROMPTS, batched, alone, strict=True):
        print(f"k={args.k} fix={args.fix} batched==alone: {b == a}  {prompt!r} -> {b!r}")


if __name__ == "__main__":
    main()
