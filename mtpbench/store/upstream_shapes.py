"""The shapes upstream projects commit their acceptance goldens in, read as mtpbench baselines (issue 39 item 2):
a team gates with mtpbench against the numbers it already commits. render/calibration.py writes the same
shapes (`mtpbench calibrate --emit`); each reads back here to the golden and rule it was written with.

- `vllm-acceptance-length`: an `Eagle3ModelConfig(...)` entry of vllm tests/v1/spec_decode/
  test_acceptance_length.py (`expected_acceptance_length=`, `expected_acceptance_lengths_per_pos=[...]`,
  optional `rtol=`; the AL check always reads DEFAULT_RTOL, 0.05, unless `DEFAULT_RTOL = ` is in the text);
  pooled.
- `vllm-acceptance-rates`: an `expected_acceptance_lengths` dict of tests/v1/e2e/spec_decode/acceptance_rates/
  (`"dataset": AL`, `key` picks one), the mean of per-request ALs, floor 0.95 (utils.py).
- `vllm-ascend-golden`: a golden list (`GOLDEN = [...]` or any `[a, b, c]`) and its margin (`ATOL = ` or the
  `b - a < x` of test_gemma4_mtp.py); pooled per-position rates.
- `trtllm-min-al`: TensorRT-LLM's references/acceptance_length.yaml, `Test::test: {ref_al, min_al}` (`key`
  picks one); pooled AL, floor min_al / ref_al.
- `sglang-threshold`: `accept_length_thres = X` (any `*accept_length_thres`); SGLang's assert is strict
  (`>`), read as AL >= X (they differ only at equality); pooled.
- `inferencex`: InferenceX golden_al_distribution/*.yaml, `model: {mode: {draft_length: AL}}`; it sets no
  threshold, so the floor is the δ mtpbench's gate uses (1 - tolerance_al_pct / 100), said in the notes.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import ValidationError

from mtpbench.errors import UserError
from mtpbench.specs import GateSpec
from mtpbench.store.baseline import Baseline, BaselineEntry, BaselineFingerprint, Provenance
from mtpbench.store.records import first_error
from mtpbench.store.upstream import UpstreamGolden, UpstreamRule, UpstreamSource

# Where each shape lives upstream: (repository, file).
FILES = {
    "vllm-acceptance-length": ("vllm-project/vllm", "tests/v1/spec_decode/test_acceptance_length.py"),
    "vllm-acceptance-rates": ("vllm-project/vllm", "tests/v1/e2e/spec_decode/acceptance_rates/utils.py"),
    "vllm-ascend-golden": (
        "vllm-project/vllm-ascend",
        "tests/e2e/pull_request/one_card/spec_decode/test_gemma4_mtp.py",
    ),
    "trtllm-min-al": ("NVIDIA/TensorRT-LLM", "tests/integration/defs/accuracy/references/acceptance_length.yaml"),
    "sglang-threshold": ("sgl-project/sglang", "python/sglang/test/kits/gsm8k_accuracy_kit.py"),
    "inferencex": ("SemiAnalysisAI/InferenceX", "golden_al_distribution/"),
}
SHAPES = tuple(FILES)
_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"


def _float(pattern: str, text: str, what: str, fmt: str) -> float:
    m = re.search(pattern, text)
    if m is None:
        raise UserError(f"{fmt}: no {what} in the text")
    return float(m.group(1))


def _list(pattern: str, text: str, what: str, fmt: str) -> list[float]:
    m = re.search(pattern, text, re.S)
    if m is None:
        raise UserError(f"{fmt}: no {what} in the text")
    return [float(x) for x in re.findall(_NUM, m.group(1))]


def _yaml(text: str, fmt: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{fmt}: not YAML: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict) or not data:
        raise UserError(f"{fmt}: expected a mapping of entries")
    return data


def _pick(data: dict[str, Any], key: str | None, fmt: str) -> tuple[str, Any]:
    if key is None:
        if len(data) != 1:
            raise UserError(f"{fmt}: {len(data)} entries; name one with --key ({', '.join(map(str, data))})")
        key = str(next(iter(data)))
    if key not in data:
        raise UserError(f"{fmt}: no entry {key!r} ({', '.join(map(str, data))})")
    return key, data[key]


def read_shape(
    fmt: str, text: str, key: str | None = None, k: int | None = None
) -> tuple[str, float | None, list[float] | None, UpstreamRule, str, str]:
    """(definition, al, per_pos, rule, the entry read, notes) from one upstream shape's text."""
    if fmt == "vllm-acceptance-length":
        al = _float(r"expected_acceptance_length\s*=\s*" + _NUM, text, "expected_acceptance_length", fmt)
        pos = _list(r"expected_acceptance_lengths_per_pos\s*=\s*\[([^\]]*)\]", text, "per-position list", fmt)
        rtol_m = re.search(r"\brtol\s*=\s*" + _NUM, text)
        default_m = re.search(r"DEFAULT_RTOL\s*=\s*" + _NUM, text)
        default = float(default_m.group(1)) if default_m else 0.05
        rtol = float(rtol_m.group(1)) if rtol_m else default
        return "pooled", al, pos, UpstreamRule(al_rtol=default, pos_rtol=rtol), "Eagle3ModelConfig", ""
    if fmt == "vllm-acceptance-rates":
        pairs = dict(re.findall(r"[\"']([^\"']+)[\"']\s*:\s*" + _NUM, text))
        name, value = _pick(pairs, key, fmt)
        return "per-request-mean", float(value), None, UpstreamRule(al_floor=0.95), name, ""
    if fmt == "vllm-ascend-golden":
        pos = _list(r"(?:GOLDEN\s*=\s*)?\[([^\]]*)\]", text, "golden list", fmt)
        margin_m = re.search(r"ATOL\s*=\s*" + _NUM, text) or re.search(r"b\s*-\s*a\s*<\s*" + _NUM, text)
        if margin_m is None:
            raise UserError(f"{fmt}: no margin (ATOL = x, or b - a < x) in the text")
        return "pooled", None, pos, UpstreamRule(pos_margin=float(margin_m.group(1))), "golden", ""
    if fmt == "trtllm-min-al":
        name, entry = _pick(_yaml(text, fmt), key, fmt)
        if not isinstance(entry, dict) or entry.get("ref_al") is None or entry.get("min_al") is None:
            raise UserError(f"{fmt}: {name}: needs ref_al and min_al (an unpopulated stub has null)")
        ref, floor = float(entry["ref_al"]), float(entry["min_al"])
        return "pooled", ref, None, UpstreamRule(al_floor=min(floor / ref, 1.0)), name, ""
    if fmt == "sglang-threshold":
        thres = _float(r"accept_length_thres\s*=\s*" + _NUM, text, "accept_length_thres", fmt)
        notes = "SGLang asserts avg_spec_accept_length > threshold (strict); read as AL >= threshold"
        return "pooled", thres, None, UpstreamRule(al_floor=1.0), "accept_length_thres", notes
    if fmt == "inferencex":
        model, modes = _pick(_yaml(text, fmt), key, fmt)
        if not isinstance(modes, dict) or not modes:
            raise UserError(f"{fmt}: {model}: expected thinking modes, each a draft length -> AL mapping")
        mode, curve = next(iter(modes.items()))
        if not isinstance(curve, dict) or not curve:
            raise UserError(f"{fmt}: {model}.{mode}: expected a draft length -> AL mapping")
        lengths = {int(d): float(v) for d, v in curve.items()}
        want = k if k is not None else max(lengths)
        if want not in lengths:
            raise UserError(f"{fmt}: {model}.{mode}: no draft length {want} ({', '.join(map(str, lengths))})")
        floor = 1.0 - GateSpec().tolerance_al_pct / 100.0
        notes = f"InferenceX sets no threshold; the floor is mtpbench's δ ({floor:g}); {model}.{mode}[{want}]"
        return "pooled", lengths[want], None, UpstreamRule(al_floor=floor), f"{model}.{mode}[{want}]", notes
    raise UserError(f"--format: unknown shape {fmt!r} (one of {', '.join(SHAPES)})")


def baseline_of_shape(
    fmt: str, text: str, name: str, commit: str, date: str, key: str | None = None, k: int | None = None
) -> Baseline:
    """A baseline whose upstream block is the shape's golden and rule (judge/signals/upstream.py applies it); its entry
    holds the golden's pooled rates where the shape has them, else none (the AL alone judges)."""
    try:
        definition, al, per_pos, rule, entry_name, notes = read_shape(fmt, text, key, k)
    except ValidationError as exc:  # a rule the file's numbers cannot make (NaN, a negative floor)
        raise UserError(f"{fmt}: the file's numbers make no rule: {first_error(exc)}") from None
    if per_pos is not None and not all(0.0 <= x <= 1.0 for x in per_pos):
        raise UserError(f"{fmt}: per-position rates are fractions in [0, 1], got {per_pos}")
    k_positions = len(per_pos) if per_pos else k
    if fmt == "inferencex":
        k_positions = int(entry_name.rsplit("[", 1)[1].rstrip("]"))  # the draft length read
    if k_positions is None:
        raise UserError(f"{fmt}: an AL-only golden needs --k (the draft length it was measured at)")
    repository, file = FILES[fmt]
    rates = None if per_pos is None else sorted((100.0 * x for x in per_pos), reverse=True)
    if rates is not None and rates != [100.0 * x for x in per_pos or []]:
        raise UserError(f"{fmt}: per-position rates {per_pos} grow with the position (acceptance is a prefix)")
    try:
        golden = UpstreamGolden(
            definition=definition,  # type: ignore[arg-type]  # read_shape returns a Definition
            al=al,
            per_pos=per_pos,
            rule=rule,
            source=UpstreamSource(
                repository=repository, file=file, commit=commit, date=date, test=entry_name, notes=notes or None
            ),
        )
    except ValueError as exc:
        raise UserError(f"{fmt}: {exc}".splitlines()[0]) from None
    return Baseline.model_validate(
        {
            "schema": 1,
            "name": name,
            "provenance": Provenance(source=f"{repository} {file} ({entry_name}), imported by mtpbench", date=date),
            "fingerprint": BaselineFingerprint(method="mtp", num_speculative_tokens=k_positions),
            "entries": [BaselineEntry(rates_pct=rates)],
            "upstream": golden,
        }
    )
