"""What runs inside a build's interpreter (worker, serving server/load/job): the standard library only at module
level, vllm imported lazily; of mtpbench only schema.py.

The stage's face: the names other stages use, each from the module that owns it (records.py: the appends, the
events and the one prompt loop; serving.py: a serving cell-repeat and the `vllm bench serve` anchor; server.py,
procs.py, fingerprint.py, chat.py). They are imported when first asked for, so that importing one engine module
(the worker, in a build's interpreter) does not import the others. The worker itself is a command
(`python -m mtpbench.engine.worker JOB.json`), not a name here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mtpbench.engine.chat import engine_prompt
    from mtpbench.engine.fingerprint import check_own_vllm, environment_fingerprint
    from mtpbench.engine.procs import stop_group
    from mtpbench.engine.records import EVENT_PREFIX, PromptLoop, append_lines, append_record, emit
    from mtpbench.engine.server import server_command
    from mtpbench.engine.serving import run_serving_job, vllm_bench_serve_command, write_bench_dataset

__all__ = [
    "EVENT_PREFIX",
    "PromptLoop",
    "append_lines",
    "append_record",
    "check_own_vllm",
    "emit",
    "engine_prompt",
    "environment_fingerprint",
    "run_serving_job",
    "server_command",
    "stop_group",
    "vllm_bench_serve_command",
    "write_bench_dataset",
]

# Each public name and the engine module that owns it.
_OWNER = {
    "EVENT_PREFIX": "records",
    "PromptLoop": "records",
    "append_lines": "records",
    "append_record": "records",
    "check_own_vllm": "fingerprint",
    "emit": "records",
    "engine_prompt": "chat",
    "environment_fingerprint": "fingerprint",
    "run_serving_job": "serving",
    "server_command": "server",
    "stop_group": "procs",
    "vllm_bench_serve_command": "serving",
    "write_bench_dataset": "serving",
}


def __getattr__(name: str) -> Any:
    owner = _OWNER.get(name)
    if owner is None:
        raise AttributeError(f"module 'mtpbench.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(f"mtpbench.engine.{owner}"), name)
