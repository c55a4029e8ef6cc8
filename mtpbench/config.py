"""Experiment configs (`configs/*.yaml`): pydantic models with unknown keys rejected, and their loading.

One experiment is a target model, a speculative config, sampling, a prompt set and the matrix axes
(builds × modes × variants × repeats); the models of its parts (speculative, sampling, build, mode, gate,
workload) are specs.py's. Relative paths are resolved against the config file's folder, so
a config works from any working directory; a bare name (`tiny-gemma4-mtp`) that is not a file names a
shipped config (`mtpbench.shipped`). A validation error becomes one `UserError` line naming the file, the
key path and what was expected.

Input is untrusted: YAML is read with the safe loader (no `!!python/...` tags), files and prompts have
size limits, and alias expansion is counted before anything walks the document, so a "billion laughs"
file is refused in milliseconds instead of exhausting memory. Numbers that must be integers or booleans
are strict (`repeats: true` or `k: 2.5` is an error, not a coercion); NaN and infinity are refused.
"""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, StrictInt, ValidationError, field_validator, model_validator

from mtpbench import shipped
from mtpbench.errors import UserError
from mtpbench.fixes.registry import REGISTRY
from mtpbench.specs import (
    BuildSpec,
    ChatTemplate,
    ConfigRole,
    GateSpec,
    ModeSpec,
    OfflineWorkload,
    PathStr,
    PromptFilter,
    SamplingSpec,
    SpeculativeSpec,
    Strict,
    Workload,
    context_prompt_id,
    is_local_requirement,
    split_hashes,
)

# Limits on untrusted input. A prompt of a million characters is ~250k tokens, beyond any context an
# acceptance probe needs; a YAML document expanding (through aliases) to more nodes than this is an attack.
MAX_YAML_BYTES = 8 * 1024 * 1024
MAX_YAML_NODES = 200_000
MAX_PROMPT_CHARS = 1_000_000


class ExperimentConfig(Strict):
    # The name becomes part of the run folder's name: no separators, nothing hidden, no "..".
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = ""
    role: ConfigRole = Field("gate", description="gate: sized to certify δ; reproduction: a published setup as is")
    model: PathStr = Field(min_length=1)
    tokenizer: PathStr | None = None
    speculative: SpeculativeSpec
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    prompts: PathStr
    # Which of the set's prompts run (categories, a limit) and how they reach the engine (raw text or the
    # tokenizer's chat template; none = what the set says): both change the run's prompt identity.
    prompt_filter: PromptFilter | None = None
    chat_template: ChatTemplate | None = None
    prompt_mode: Literal["batched", "sequential"] = Field(
        "sequential",
        description="batched: all prompts of a repeat at once, counted per request; sequential: one at a time",
    )
    repeats: StrictInt = Field(3, gt=0, le=100)
    # One PYTHONHASHSEED per repeat; distinct seeds are what exposes set-iteration-order bugs.
    hash_seeds: list[StrictInt] | None = None
    builds: dict[str, BuildSpec] = Field(default_factory=lambda: {"current": BuildSpec()})
    modes: dict[str, ModeSpec] = Field(default_factory=lambda: {"eager": ModeSpec(enforce_eager=True)})
    variants: dict[str, list[str]] = Field(default_factory=lambda: {"stock": []})
    engine_args: dict[str, Any] = Field(default_factory=dict)
    baseline: PathStr | None = None
    # Which baseline entry judges a cell whose build/mode has no entry of its own: "build/mode" (or
    # "build/mode/variant") -> "build/mode" of the entry. Without it, an unmatched cell is not comparable.
    baseline_entry: dict[str, str] = Field(default_factory=dict)
    gate: GateSpec = Field(default_factory=GateSpec)
    timeout_s: float = Field(1800.0, gt=0, description="default for both deadlines below")
    # Separate deadlines, so a slow graph capture is not taken for a hung generation (and vice versa).
    startup_timeout_s: float | None = Field(None, gt=0, description="process start to engine ready")
    generation_timeout_s: float | None = Field(None, gt=0, description="engine ready to the worker's exit")
    jobs: StrictInt = Field(1, ge=1, le=1024, description="cell-repeats run at once, one device (set) each")
    devices: list[str | int] | None = Field(None, description="device ids (or CPU core sets) for the pool")
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    ray_resource: Literal["GPU", "NPU", "CPU"] | None = Field(None, description="default: from the platform")
    # Every wait on Ray has a deadline; each ends in one line and exit 3 naming it (docs/parallel.md).
    ray_start_timeout_s: float = Field(120.0, gt=0, allow_inf_nan=False, description="starting our own cluster")
    ray_connect_timeout_s: float = Field(60.0, gt=0, allow_inf_nan=False, description="reaching a named cluster")
    ray_upload_timeout_s: float = Field(300.0, gt=0, allow_inf_nan=False, description="shipping mtpbench to nodes")
    ray_place_timeout_s: float = Field(120.0, gt=0, allow_inf_nan=False, description="a task no node can place")
    reference_mode: str | None = Field(None, description="mode graph modes are checked against")
    # Issue 28: every other build is held against this one, mode by mode (`build-divergence`, judge/signals/builds.py).
    reference_build: str | None = Field(None, description="build the other builds are checked against (first)")
    # Issue 29: after the run, replay its greedy prompts from the weights (`mtpbench reference`) so the verdict
    # also holds the engine against the acceptance its weights give (docs/reference.md).
    reference_replay: bool = Field(False, description="after the run, recompute its acceptance from the weights")
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
        named = [(f"variants.{v}", ps) for v, ps in self.variants.items()]
        named += [(f"builds.{b}.patches", spec.patches) for b, spec in self.builds.items()]
        for where, patches in named:
            bad = [p for p in patches if p not in REGISTRY]
            if bad:
                raise ValueError(f"{where}: unknown patch {bad[0]!r}; known: {', '.join(sorted(REGISTRY))}")
        if self.hash_seeds is not None:
            if len(self.hash_seeds) != self.repeats:
                raise ValueError(f"hash_seeds: {len(self.hash_seeds)} seeds for {self.repeats} repeats")
            if any(s < 0 or s > 4294967295 for s in self.hash_seeds):
                raise ValueError("hash_seeds: PYTHONHASHSEED must be in 0..4294967295")
            if len(set(self.hash_seeds)) != len(self.hash_seeds):
                # Two repeats with one seed are one observation of the iteration order, not two.
                raise ValueError(f"hash_seeds: duplicate seed in {self.hash_seeds}; each repeat needs its own")
        if self.devices is not None and (not self.devices or len(set(self.devices)) != len(self.devices)):
            raise ValueError("devices: give at least one device, each once")
        for key, entry in self.baseline_entry.items():
            if key.count("/") not in (1, 2) or entry.count("/") != 1:
                raise ValueError(f"baseline_entry: {key!r}: {entry!r}: expected 'build/mode[/variant]': 'build/mode'")
        if self.reference_mode is not None and self.reference_mode not in self.modes:
            raise ValueError(f"reference_mode: {self.reference_mode!r} is not one of the modes")
        if self.reference_build is not None and self.reference_build not in self.builds:
            raise ValueError(
                f"reference_build: {self.reference_build!r} is not one of the builds ({', '.join(self.builds)})"
            )
        if self.speculative.sweep and self.workload.kind != "offline":
            # Serving and soak read one k per run (their counters and summaries); the sweep is offline's.
            raise ValueError(
                f"speculative.num_speculative_tokens: a k sweep runs the offline workload, not {self.workload.kind}"
            )
        if self.reference_replay and self.sampling.temperature > 0:
            raise ValueError("reference_replay: the reference replays greedy decoding; sampling.temperature must be 0")
        return self

    @field_validator("devices")
    @classmethod
    def _device_names(cls, v: list[str | int] | None) -> list[str | int] | None:
        return None if v is None else [str(d).strip() for d in v]

    def seeds(self) -> list[int]:
        return list(self.hash_seeds) if self.hash_seeds is not None else list(range(self.repeats))


class Prompt(Strict):
    id: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    category: str | None = Field(None, min_length=1, max_length=100)
    # Later user turns of a conversation (MT-Bench's second turn): each is sent after the model's answer to
    # the turns before it, and the prompt's counts are those of the whole conversation.
    followups: list[str] = Field(default_factory=list, max_length=16)
    # Set by a config's context sweep (workload.context, config_prompts), not by prompt files: how many
    # tokens of the shared context the worker puts before the text (engine/context.py).
    context_tokens: StrictInt | None = Field(None, ge=0)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the prompt is blank")
        return v


class PromptSource(Strict):
    """Where a set built from a published file came from (benchmarks/build_prompt_sets.py writes it)."""

    package: str
    version: str
    file: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    license: str
    license_file: str | None = None
    record_field: str = Field(description="which part of each record is the prompt")


class PromptSet(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    chat_template: ChatTemplate = "raw"
    source: PromptSource | None = None
    # Set by a config's context sweep (config_prompts): the sha256 of the shared context's text.
    context_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
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
        # Ids and texts only: renaming the set or its description keeps results comparable. Later turns and
        # the chat template change what the engine sees, so they count too (a raw single-turn set keeps the
        # digest it always had).
        items: list[Any] = [
            [p.id, p.text, *([p.followups] if p.followups else []), *([p.context_tokens] if p.context_tokens else [])]
            for p in self.prompts
        ]
        data: Any = items if self.chat_template == "raw" else {"chat_template": self.chat_template, "prompts": items}
        if self.context_sha256 is not None:
            # The shared context's text is part of what the engine sees: another text, another identity.
            data = {"context_sha256": self.context_sha256, "prompts": data}
        canon = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()


def _loc(err: dict[str, Any]) -> str:
    # A key from the file may hold a newline or other control character: quoted, so the error stays one line.
    return ".".join(str(p) if str(p).isprintable() else repr(p) for p in err["loc"]) or "(top level)"


def format_validation_error(path: Path, exc: ValidationError) -> str:
    err = exc.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{path}: {_loc(err)}: {' '.join(msg.split())}{more}"


def _expanded_size(root: yaml.Node) -> int:
    """Nodes the document would have with every alias expanded, counted without expanding (shared nodes
    are counted once per reference, in linear time); refuses recursive aliases."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            kids = _children(node)
            size[key] = min(1 + sum(size[id(c)] for c in kids), MAX_YAML_NODES + 1)
            continue
        if key in size:
            continue
        if key in on_path:
            raise ValueError("a recursive alias (a node that contains itself)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    return size[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same rules, ~100x faster


def _safe_load(text: str) -> Any:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            n = _expanded_size(node)
        except ValueError as exc:
            raise _Refused(str(exc)) from None
        if n > MAX_YAML_NODES:
            raise _Refused(f"expands to more than {MAX_YAML_NODES} nodes through aliases")
        return loader.construct_document(node)
    finally:
        loader.dispose()


class _Refused(Exception):
    pass


def path_kind(path: Path, what: str) -> str:
    """ "file", "dir", "missing" or "other" for a path a user gave; a name no filesystem takes (too long, a
    NUL byte) is a one-line UserError instead of pathlib's OSError."""
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except (OSError, ValueError) as exc:
        raise UserError(f"{str(path)[:200]}: cannot use as {what}: {getattr(exc, 'strerror', None) or exc}") from None
    return "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"


def read_yaml(path: Path, what: str) -> dict[str, Any]:
    """A YAML file as a mapping, or a one-line UserError naming the file (and line) and what is wrong."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{path}: {what} file not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: {what} file is a folder") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{str(path)[:200]}: cannot read {what}: {getattr(exc, 'strerror', None) or exc}") from None
    if len(raw) > MAX_YAML_BYTES:
        raise UserError(f"{path}: {what} file is larger than {MAX_YAML_BYTES // (1024 * 1024)} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: {what} file is not UTF-8 (byte {exc.start})") from None
    try:
        data = _safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{mark.line + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise UserError(f"{path}:{where} malformed YAML: {problem}") from None
    except _Refused as exc:
        raise UserError(f"{path}: refused YAML: {exc}") from None
    except RecursionError:
        raise UserError(f"{path}: refused YAML: nested too deeply") from None
    if data is None:  # a file cut off before its first key reads as no document at all
        raise UserError(f"{path}: expected a mapping at the top level, got an empty document (no keys)")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _resolve(base: Path, value: str, must_exist: bool) -> str:
    p = Path(value).expanduser()
    if p.is_absolute():
        return str(p)
    candidate = shipped.rebase((base / p).resolve())
    # A model may be a hub id ("org/name"): only rewrite it when it names something next to the config.
    try:
        exists = candidate.exists()
    except OSError:  # a name too long for the filesystem names nothing there
        exists = False
    if must_exist or exists:
        return str(candidate)
    return value


def config_path(arg: str | Path) -> Path:
    """The config a command line names: a file, or else the name of a shipped config (`tiny-gemma4-mtp`)."""
    path = Path(arg)
    if path_kind(path, "a config") != "missing" or path.parent != Path("."):
        return path
    found = shipped.shipped_file("configs", str(arg))
    return found if found is not None else path


def load_config(path: str | Path) -> ExperimentConfig:
    path = config_path(path)
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
    if cfg.workload.kind == "soak" and cfg.workload.other_prompts:
        cfg.workload.other_prompts = _resolve(base, cfg.workload.other_prompts, must_exist=True)
    if cfg.workload.kind == "offline" and cfg.workload.context is not None:
        cfg.workload.context.source = _resolve(base, cfg.workload.context.source, must_exist=True)
    for name, b in cfg.builds.items():
        if b.python and ("/" in b.python):
            b.python = _resolve(base, b.python, must_exist=False)
        if b.base_python and ("/" in b.base_python):
            b.base_python = _resolve(base, b.base_python, must_exist=False)
        # A local wheel or source folder is named relative to the config, like every other path in it.
        if b.requirements is not None:
            b.requirements = [
                _resolve_requirement(path, f"builds.{name}.requirements.{i}", r) for i, r in enumerate(b.requirements)
            ]
    return cfg


def _resolve_requirement(config: Path, key: str, requirement: str) -> str:
    """A local requirement's path relative to the config, its hash options kept after it; one that names
    nothing there is bad input naming the config's key (issue 37: it surfaced at install time, keyless)."""
    if not is_local_requirement(requirement):
        return requirement
    pin, options = split_hashes(requirement)
    resolved = _resolve(config.resolve().parent, pin, must_exist=True)
    if not Path(resolved).exists():
        raise UserError(f"{config}: {key}: {pin!r}: local requirement not found (no file or folder {resolved})")
    return " ".join([resolved, *options])


def load_prompts(path: str | Path) -> PromptSet:
    path = Path(path)
    data = read_yaml(path, "prompts")
    try:
        return PromptSet.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(path, exc)) from None


def config_prompts(cfg: ExperimentConfig) -> PromptSet:
    """The prompts a config runs: its set, filtered (`prompt_filter`), sent as `chat_template` says."""
    ps = load_prompts(cfg.prompts)
    if cfg.chat_template is not None:
        ps.chat_template = cfg.chat_template
    if cfg.workload.kind != "offline" and (ps.chat_template != "raw" or any(p.followups for p in ps.prompts)):
        # The serving load posts raw text to /v1/completions and a soak round sends raw texts: a chat or
        # multi-turn set would run under an identity (sha256) that says otherwise.
        raise UserError(
            f"{cfg.prompts}: the {cfg.workload.kind} workload sends raw single-turn prompts: use "
            "chat_template: raw and a set without followups"
        )
    return with_context(cfg, filtered(cfg, ps))


def filtered(cfg: ExperimentConfig, ps: PromptSet) -> PromptSet:
    """The set's prompts that the config's `prompt_filter` keeps."""
    f = cfg.prompt_filter
    if f is None:
        return ps
    kept = ps.prompts
    if f.categories is not None:
        known = {p.category for p in kept if p.category}
        unknown = sorted(set(f.categories) - known)
        if unknown:
            have = ", ".join(sorted(known)) or "none"
            raise UserError(
                f"{cfg.prompts}: prompt_filter.categories: {unknown[0]!r} is not a category of the set (it has: {have})"
            )
        kept = [p for p in kept if p.category in f.categories]
    if f.max_prompt_bytes is not None:
        kept = [p for p in kept if sum(len(t.encode()) for t in (p.text, *p.followups)) <= f.max_prompt_bytes]
    if not kept:
        raise UserError(f"{cfg.prompts}: prompt_filter leaves no prompt to run")
    if f.limit is not None:
        kept = kept[: f.limit]
    return ps.model_copy(update={"prompts": kept})


def context_text(cfg: ExperimentConfig) -> str:
    """A context sweep's shared text: its source set's prompt texts joined by blank lines."""
    wl = cfg.workload
    if wl.kind != "offline" or wl.context is None:
        return ""
    return "\n\n".join(p.text for p in load_prompts(wl.context.source).prompts)


def context_lengths(cfg: ExperimentConfig) -> list[int]:
    """A context sweep's buckets in tokens (fraction × max_model_len, rounded down); empty without one."""
    wl = cfg.workload
    if wl.kind != "offline" or wl.context is None:
        return []
    max_len = cfg.engine_args.get("max_model_len")
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len <= 0:
        raise UserError("workload.context: needs engine_args.max_model_len (its fractions are shares of it)")
    lengths = [int(f * max_len) for f in wl.context.fractions]
    if len(set(lengths)) != len(lengths):
        raise UserError(f"workload.context: fractions {wl.context.fractions} give equal lengths {lengths} tokens")
    return lengths


def with_context(cfg: ExperimentConfig, ps: PromptSet) -> PromptSet:
    """Under a context sweep, every prompt once per bucket (`<id>@ctx<tokens>`, bucket by bucket), refused
    in one line when the longest context, the longest prompt and max_tokens do not fit in max_model_len. A
    prompt's UTF-8 bytes (+1 for a start token) bound its tokens for the byte-level and BPE tokenizers the
    check is meant for; the engine refuses whatever still does not fit."""
    lengths = context_lengths(cfg)
    if not lengths:
        return ps
    if ps.chat_template != "raw" or any(p.followups for p in ps.prompts):
        raise UserError(f"{cfg.prompts}: workload.context sends raw single-turn prompts: use chat_template: raw")
    max_len = int(cfg.engine_args["max_model_len"])
    longest = max(len(p.text.encode()) + 1 for p in ps.prompts)
    need = lengths[-1] + longest + cfg.sampling.max_tokens
    if need > max_len:
        raise UserError(
            f"workload.context: the longest context ({lengths[-1]} tokens) + the longest prompt (<= {longest} "
            f"tokens) + max_tokens {cfg.sampling.max_tokens} = {need} exceed max_model_len {max_len}"
        )
    text = context_text(cfg)
    if lengths[-1] and not text.strip():
        raise UserError("workload.context: the source's prompt texts are empty: no context to put before the prompts")
    prompts = [
        p.model_copy(update={"id": context_prompt_id(p.id, n), "context_tokens": n})
        for n in lengths
        for p in ps.prompts
    ]
    digest = hashlib.sha256(text.encode()).hexdigest()
    return ps.model_copy(update={"prompts": prompts, "context_sha256": digest})
