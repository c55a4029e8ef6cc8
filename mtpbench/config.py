"""Experiment configs (`configs/*.yaml`): pydantic models with unknown keys rejected, and their loading.

One experiment is a target model, a speculative config, sampling, a prompt set and the matrix axes
(builds × modes × variants × repeats). Relative paths are resolved against the config file's folder, so
a config works from any working directory. A validation error becomes one `UserError` line naming the
file, the key path and what was expected.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mtpbench.errors import UserError
from mtpbench.patches import REGISTRY

# vLLM's CUDAGraphMode names (vllm/config/compilation.py); vllm-ascend uses the same enum.
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpeculativeSpec(Strict):
    method: str = Field(min_length=1, description="vLLM speculative method: mtp, eagle, eagle3, draft_model, ngram…")
    model: str | None = Field(None, description="drafter model path or id (none for ngram)")
    num_speculative_tokens: int = Field(gt=0, le=16)
    extra: dict[str, Any] = Field(default_factory=dict, description="passthrough keys of speculative_config")

    def to_vllm(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.model is not None:
            out["model"] = self.model
        return {**out, **self.extra}


class SamplingSpec(Strict):
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1)
    max_tokens: int = Field(128, gt=0)
    seed: int | None = None
    ignore_eos: bool = False


class BuildSpec(Strict):
    python: str | None = Field(None, description="interpreter of the build; none = the current one")
    env: dict[str, str] = Field(default_factory=dict)


class ModeSpec(Strict):
    cudagraph_mode: str | None = None
    enforce_eager: bool | None = None
    compilation_config: dict[str, Any] = Field(default_factory=dict)
    engine_args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("cudagraph_mode")
    @classmethod
    def _known_mode(cls, v: str | None) -> str | None:
        if v is not None and v.upper() not in CUDAGRAPH_MODES:
            raise ValueError(f"expected one of {', '.join(CUDAGRAPH_MODES)}")
        return v.upper() if v is not None else None


class GateSpec(Strict):
    tolerance_pts: float = Field(5.0, ge=0.0, description="allowed drop per position, absolute points")
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    instability_pts: float = Field(2.0, ge=0.0, description="allowed spread across greedy repeats, points")
    divergence_pts: float = Field(5.0, ge=0.0, description="allowed graph-vs-eager gap, points")
    fail_on_improvement: bool = False


class OfflineWorkload(Strict):
    """The prompts one at a time through vllm.LLM in the worker (the default)."""

    kind: Literal["offline"] = "offline"


class ServingWorkload(Strict):
    """vLLM's OpenAI-compatible server per cell-repeat and a fixed-concurrency streaming load
    (mtpbench/serving.py). The prompts are the config's `prompts`, sent round-robin."""

    kind: Literal["serving"]
    concurrency: int = Field(16, gt=0, le=1024, description="requests in flight at once")
    num_requests: int = Field(300, gt=0, le=100_000)
    request_rate: float | None = Field(None, gt=0, description="req/s (Poisson arrivals); none = unlimited")
    max_tokens: int | None = Field(None, gt=0, description="per request; none = sampling.max_tokens")
    warmup_requests: int = Field(0, ge=0, le=10_000, description="sent first, not counted")
    request_timeout_s: float = Field(300.0, gt=0, le=86_400)
    startup_timeout_s: float = Field(900.0, gt=0, le=86_400, description="deadline for the server's /health")
    server_args: list[str] = Field(default_factory=list, description="extra api_server CLI arguments")
    throughput_tolerance_pct: float = Field(
        20.0, ge=0.0, description="req/s drop vs the baseline entry that is reported (hardware differs)"
    )
    fail_on_throughput_drop: bool = False

    @field_validator("server_args")
    @classmethod
    def _loopback_only(cls, v: list[str]) -> list[str]:
        # mtpbench owns where the server listens (loopback, a free port) and what it serves.
        owned = ("--host", "--port", "--model", "--speculative-config", "--uds")
        bad = [a for a in v if a.split("=", 1)[0] in owned]
        if bad:
            flag = bad[0].split("=", 1)[0]
            raise ValueError(f"{flag} is set by mtpbench (loopback, a free port, the config's model)")
        return v


Workload = Annotated[OfflineWorkload | ServingWorkload, Field(discriminator="kind")]


class ExperimentConfig(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    description: str = ""
    model: str = Field(min_length=1)
    tokenizer: str | None = None
    speculative: SpeculativeSpec
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    prompts: str
    repeats: int = Field(3, gt=0, le=100)
    # One PYTHONHASHSEED per repeat; distinct seeds are what exposes set-iteration-order bugs.
    hash_seeds: list[int] | None = None
    builds: dict[str, BuildSpec] = Field(default_factory=lambda: {"current": BuildSpec()})
    modes: dict[str, ModeSpec] = Field(default_factory=lambda: {"eager": ModeSpec(enforce_eager=True)})
    variants: dict[str, list[str]] = Field(default_factory=lambda: {"stock": []})
    engine_args: dict[str, Any] = Field(default_factory=dict)
    baseline: str | None = None
    gate: GateSpec = Field(default_factory=GateSpec)
    timeout_s: float = Field(1800.0, gt=0)
    reference_mode: str | None = Field(None, description="mode graph modes are checked against")
    workload: Workload = Field(default_factory=OfflineWorkload)

    @model_validator(mode="after")
    def _check_axes(self) -> ExperimentConfig:
        for axis in ("builds", "modes", "variants"):
            names = getattr(self, axis)
            if not names:
                raise ValueError(f"{axis}: at least one entry is needed")
            for n in names:
                if not n or "/" in n or n != n.strip():
                    raise ValueError(f"{axis}: name {n!r} must be non-empty and contain no '/'")
        for vname, patches in self.variants.items():
            bad = [p for p in patches if p not in REGISTRY]
            if bad:
                raise ValueError(f"variants.{vname}: unknown patch {bad[0]!r}; known: {', '.join(sorted(REGISTRY))}")
        if self.hash_seeds is not None:
            if len(self.hash_seeds) != self.repeats:
                raise ValueError(f"hash_seeds: {len(self.hash_seeds)} seeds for {self.repeats} repeats")
            if any(s < 0 or s > 4294967295 for s in self.hash_seeds):
                raise ValueError("hash_seeds: PYTHONHASHSEED must be in 0..4294967295")
        if self.reference_mode is not None and self.reference_mode not in self.modes:
            raise ValueError(f"reference_mode: {self.reference_mode!r} is not one of the modes")
        return self

    def seeds(self) -> list[int]:
        return list(self.hash_seeds) if self.hash_seeds is not None else list(range(self.repeats))


class Prompt(Strict):
    id: str = Field(min_length=1)
    text: str = Field(min_length=1)


class PromptSet(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    prompts: list[Prompt]

    @field_validator("prompts")
    @classmethod
    def _non_empty_unique(cls, v: list[Prompt]) -> list[Prompt]:
        if not v:
            raise ValueError("the prompt set is empty")
        ids = [p.id for p in v]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"duplicate prompt id {sorted(dup)[0]!r}")
        return v

    def sha256(self) -> str:
        # Ids and texts only: renaming the set or its description keeps results comparable.
        canon = json.dumps([[p.id, p.text] for p in self.prompts], ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()


def _loc(err: dict[str, Any]) -> str:
    return ".".join(str(p) for p in err["loc"]) or "(top level)"


def format_validation_error(path: Path, exc: ValidationError) -> str:
    err = exc.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{path}: {_loc(err)}: {msg}{more}"


def read_yaml(path: Path, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: {what} file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read {what}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise UserError(f"{path}:{where}: malformed YAML: {problem}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _resolve(base: Path, value: str, must_exist: bool) -> str:
    p = Path(value).expanduser()
    if p.is_absolute():
        return str(p)
    candidate = (base / p).resolve()
    # A model may be a hub id ("org/name"): only rewrite it when it names something next to the config.
    if must_exist or candidate.exists():
        return str(candidate)
    return value


def load_config(path: str | Path) -> ExperimentConfig:
    path = Path(path)
    data = read_yaml(path, "config")
    try:
        cfg = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(path, exc)) from None
    base = path.resolve().parent
    cfg.prompts = _resolve(base, cfg.prompts, must_exist=True)
    cfg.model = _resolve(base, cfg.model, must_exist=False)
    if cfg.tokenizer:
        cfg.tokenizer = _resolve(base, cfg.tokenizer, must_exist=False)
    if cfg.speculative.model:
        cfg.speculative.model = _resolve(base, cfg.speculative.model, must_exist=False)
    if cfg.baseline:
        cfg.baseline = _resolve(base, cfg.baseline, must_exist=True)
    for b in cfg.builds.values():
        if b.python and ("/" in b.python):
            b.python = _resolve(base, b.python, must_exist=False)
    return cfg


def load_prompts(path: str | Path) -> PromptSet:
    path = Path(path)
    data = read_yaml(path, "prompts")
    try:
        return PromptSet.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(path, exc)) from None
