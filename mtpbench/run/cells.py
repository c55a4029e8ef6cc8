"""The matrix of a run: a config expanded into cell-repeats (build × mode × variant × repeat, each with
its PYTHONHASHSEED), and each cell-repeat's job (the engine arguments of its mode, the job file the worker
reads, its command line and environment). Pure: nothing starts here.

A k sweep (`speculative.num_speculative_tokens: [1, 3, 5]`, issue 38) is one more axis, innermost before the
repeats: each k is its own cell, named `build/mode/variant@k<k>`, so every pairing the judge makes by
build, mode and variant (graph divergence, build divergence) stays within one k."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtpbench.config import ExperimentConfig, PromptSet, context_text, load_prompts
from mtpbench.errors import ExitCode, UserError
from mtpbench.patches import PATCHES_ENV
from mtpbench.run.pythonpath import worker_pythonpath
from mtpbench.schema import FEATURES_READ_BACK


@dataclass(frozen=True)
class Cell:
    build: str
    mode: str
    variant: str
    repeat: int
    hash_seed: int
    k: int | None = None  # a k sweep's k for this cell; None: the run's one k

    @property
    def label(self) -> str:
        """The variant as the run records it: the config's name, with `@k<k>` in a k sweep."""
        return self.variant if self.k is None else k_label(self.variant, self.k)

    @property
    def cell_id(self) -> str:
        return f"{self.build}/{self.mode}/{self.label}"

    @property
    def slug(self) -> str:
        return f"{self.build}-{self.mode}-{self.label}-r{self.repeat}".replace("/", "_").replace("@", "_")


def k_label(variant: str, k: int) -> str:
    """A k sweep's variant name for one k (`stock@k3`)."""
    return f"{variant}@k{k}"


def config_variant(label: str, k: int | None) -> str:
    """The config's variant name of a recorded one (the inverse of `k_label`)."""
    return label if k is None else label.removesuffix(f"@k{k}")


@dataclass
class CellJob:
    cell: Cell
    python: str
    env: dict[str, str]  # only what mtpbench and the build add to the inherited environment
    job: dict[str, Any]

    def command(self, job_path: str = "JOB.json") -> list[str]:
        return [self.python, "-m", "mtpbench.engine.worker", job_path]


@dataclass
class RunOutcome:
    path: Path
    manifest: dict[str, Any]
    failed: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.RUN_FAILED if self.failed else ExitCode.OK


def engine_args_for(cfg: ExperimentConfig, mode: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The vllm.LLM kwargs of one mode, and what was requested of graphs/compilation (for the record)."""
    spec = cfg.modes[mode]
    args: dict[str, Any] = {**cfg.engine_args, **spec.engine_args}
    if cfg.tokenizer:
        args.setdefault("tokenizer", cfg.tokenizer)
    if spec.enforce_eager is not None:
        args["enforce_eager"] = spec.enforce_eager
    cc: dict[str, Any] = {**(args.get("compilation_config") or {}), **spec.compilation_config}
    if spec.cudagraph_mode is not None:
        cc["cudagraph_mode"] = spec.cudagraph_mode
    if cc:
        args["compilation_config"] = cc
    else:
        args.pop("compilation_config", None)
    requested = {
        "cudagraph_mode": cc.get("cudagraph_mode"),
        "compilation_mode": cc.get("mode", cc.get("level")),
        "enforce_eager": bool(args.get("enforce_eager", False)),
        # Engine features the worker reads back (engine/fingerprint.py), only where the config sets them.
        **{k: args[k] for k in FEATURES_READ_BACK if k in args},
    }
    return args, requested


def expand(
    cfg: ExperimentConfig, only_modes: list[str] | None = None, only_builds: list[str] | None = None
) -> list[Cell]:
    """The config's cell-repeats, build × mode × variant × k × repeat in that order (optionally only some builds
    or modes), each repeat with its PYTHONHASHSEED; k only in a k sweep."""
    seeds = cfg.seeds()
    ks: list[int | None] = list(cfg.speculative.ks) if cfg.speculative.sweep else [None]
    cells: list[Cell] = []
    for build in cfg.builds:
        if only_builds and build not in only_builds:
            continue
        for mode in cfg.modes:
            if only_modes and mode not in only_modes:
                continue
            for variant in cfg.variants:
                for k in ks:
                    for repeat in range(cfg.repeats):
                        cells.append(
                            Cell(build=build, mode=mode, variant=variant, repeat=repeat, hash_seed=seeds[repeat], k=k)
                        )
    return cells


def cell_jobs(
    cfg: ExperimentConfig, prompts: PromptSet, cells: list[Cell], run_id: str, records_path: str
) -> list[CellJob]:
    """Each cell-repeat's job file, interpreter and environment (nothing is started)."""
    plans: list[CellJob] = []
    sampling = cfg.sampling.model_dump(exclude_none=True)
    soak = soak_job_fields(cfg)
    context = context_text(cfg)
    for cell in cells:
        build = cfg.builds[cell.build]
        engine_args, requested = engine_args_for(cfg, cell.mode)
        if soak.get("prefix_caching") is not None:
            engine_args["enable_prefix_caching"] = soak["prefix_caching"]
        interpreter = build.interpreter()
        if build.from_pins and interpreter is None:
            # Planning never installs: run/envs/builds.py gives every build from pins its environment first.
            raise UserError(f"build {cell.build}: its environment is not provisioned (resolve the builds first)")
        # The build's own patches (a regression emulated on a release), then the variant's.
        patches = [*build.patches, *(name for name in cfg.variants[cell.variant] if name not in build.patches)]
        pythonpath = worker_pythonpath(build.env.get("PYTHONPATH", ""), os.environ.get("PYTHONPATH", ""))
        env = {
            **build.env,
            "PYTHONHASHSEED": str(cell.hash_seed),
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "PYTHONPATH": pythonpath,
            # Always set, even empty: a user's own MTPBENCH_PATCHES must not leak into a stock cell.
            PATCHES_ENV: ",".join(patches),
        }
        job = {
            "run_id": run_id,
            "cell": cell.cell_id,
            "build": cell.build,
            "mode": cell.mode,
            "variant": cell.label,
            "repeat": cell.repeat,
            "hash_seed": cell.hash_seed,
            "model": cfg.model,
            "speculative_config": cfg.speculative.to_vllm(cell.k),
            "engine_args": engine_args,
            "requested": requested,
            "sampling": sampling,
            "patches": patches,
            "prompts": [p.model_dump() for p in prompts.prompts],
            # raw | chat: the worker renders chat prompts with the target's tokenizer (mtpbench/engine/chat.py)
            "chat_template": prompts.chat_template,
            "prompt_mode": cfg.prompt_mode,
            "records_path": records_path,
            # A build with its own interpreter must not import vLLM from this environment (the worker checks).
            "foreign_prefix": sys.prefix if interpreter else None,
            # offline | serving (engine/serving.py) | soak (engine/soak.py); the worker dispatches on its kind.
            "workload": cfg.workload.model_dump(mode="json"),
            **({"soak_other_prompts": soak["other"]} if soak else {}),
            # A context sweep's shared text (engine/context.py puts each prompt's context_tokens of it first).
            **({"context_text": context} if context else {}),
        }
        plans.append(CellJob(cell=cell, python=interpreter or sys.executable, env=env, job=job))
    return plans


def soak_job_fields(cfg: ExperimentConfig) -> dict[str, Any]:
    """A soak workload's set B (read here, so a bad file is a usage error before any engine starts) and its
    prefix-caching switch; empty for other workloads."""
    wl = cfg.workload
    if wl.kind != "soak":
        return {}
    other = load_prompts(wl.other_prompts).prompts if wl.other_prompts else []
    return {"other": [p.model_dump() for p in other], "prefix_caching": wl.prefix_caching}
