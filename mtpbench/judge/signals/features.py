"""Engine features (prefix caching, chunked prefill, batch size, async scheduling, context length) as the judge
sees them: which of a mode's overrides differ from the reference mode's (`feature_changes`), the divergence of
such a mode named as a `mode-divergence` of those features (`as_mode_divergence`; the rule is
diagnoses.divergence's, the paired one graph divergence uses), and a feature the engine was asked for but read
back otherwise (`ignored_features`: a warning, never a silent pass). Graph and compile settings stay graph
divergence's and graph-mode-downgraded's. Nothing here prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mtpbench.judge.evidence import CellResult
from mtpbench.judge.findings import Cause, Divergence, Finding, Kind, Severity
from mtpbench.judge.findings.features import FeatureChange, FeatureIgnored, FeatureReadBack, ModeDivergence
from mtpbench.schema import FEATURES_READ_BACK

# Overrides that make a mode a graph mode: a mode differing from the reference only in these is judged as
# graph divergence (its cause, words and JSON unchanged); any other difference makes it a feature mode.
GRAPH_KEYS = ("enforce_eager", "cudagraph_mode", "compilation_config")


def _is_graph_key(name: str) -> bool:
    return name in GRAPH_KEYS or name.startswith("compilation_config.")


def mode_overrides(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A mode's engine overrides (config.py ModeSpec as the manifest stores it), flat: its engine arguments,
    its graph switches, and each compilation_config key as `compilation_config.<key>`."""
    args = dict(spec.get("engine_args") or {})
    out: dict[str, Any] = {k: v for k, v in args.items() if k not in ("compilation_config", "enforce_eager")}
    eager = spec.get("enforce_eager")
    if eager is None:
        eager = args.get("enforce_eager")
    if eager is not None:
        out["enforce_eager"] = eager
    cc = {**(args.get("compilation_config") or {}), **(spec.get("compilation_config") or {})}
    cudagraph = spec.get("cudagraph_mode") or cc.pop("cudagraph_mode", None)
    cc.pop("cudagraph_mode", None)
    if cudagraph is not None:
        out["cudagraph_mode"] = cudagraph
    out.update({f"compilation_config.{k}": v for k, v in cc.items()})
    return out


def _value(name: str, overrides: Mapping[str, Any], cell: CellResult) -> Any:
    """What a cell ran `name` as: its mode's override, else what its engine read back (None: unknown)."""
    if name in overrides:
        return overrides[name]
    if name in cell.requested:
        return cell.requested[name]
    return cell.effective.get(name)


def feature_changes(modes: Mapping[str, Mapping[str, Any]], cell: CellResult, ref: CellResult) -> list[FeatureChange]:
    """The overrides in which the cell's mode's config differs from the reference's (one sets it, the other
    does not, or they set it otherwise), in the mode's order then the reference's; empty when the manifest
    does not carry the modes (a constructed or an old run). A mode that asks for the engine's default is
    still a feature mode (`enable_prefix_caching=true → true`): what it changes is in its config, and a
    divergence of it is not a graph's."""
    mine = mode_overrides(modes.get(cell.mode) or {})
    theirs = mode_overrides(modes.get(ref.mode) or {})
    names = [*mine, *(n for n in theirs if n not in mine)]
    return [
        FeatureChange(name=name, reference=_value(name, theirs, ref), mode=_value(name, mine, cell))
        for name in names
        if name not in mine or name not in theirs or mine[name] != theirs[name]
    ]


def is_feature_mode(changes: list[FeatureChange]) -> bool:
    """A mode differing from the reference in anything beyond its graph and compile settings."""
    return any(not _is_graph_key(c.name) for c in changes)


def as_mode_divergence(finding: Finding, changes: list[FeatureChange]) -> Finding:
    """A divergence (diagnoses.divergence's finding: graph-divergence or inconclusive) of a feature mode,
    retold as a mode-divergence naming the features; the numbers are the same paired rule's."""
    payload = finding.payload
    if not isinstance(payload, Divergence):
        return finding
    fields = {f.name: getattr(payload, f.name) for f in dataclasses.fields(payload) if f.name != "check"}
    kind = Kind.MODE_DIVERGENCE if finding.kind == Kind.GRAPH_DIVERGENCE else finding.kind
    # Same text with different acceptance points at the draft path under the feature, not at graph metadata.
    cause = Cause.ENGINE_FEATURE if finding.cause == Cause.DRAFT_GRAPH_METADATA else finding.cause
    return Finding(kind, finding.severity, finding.cell, cause, ModeDivergence(**fields, features=changes))


def ignored_features(cell: CellResult) -> Finding | None:
    """The features a cell requested that its engine read back otherwise, as one warning (None: every one as
    asked, or none requested). A value not read back counts too: an unverified feature is not a pass."""
    differing = [
        FeatureReadBack(name=name, requested=cell.requested[name], effective=cell.effective.get(name))
        for name in FEATURES_READ_BACK
        if name in cell.requested and cell.effective.get(name) != cell.requested[name]
    ]
    if not differing:
        return None
    device = cell.effective.get("device_type")
    return Finding(
        Kind.FEATURE_IGNORED,
        Severity.WARN,
        cell.cell,
        Cause.FEATURE_OVERRIDDEN,
        FeatureIgnored(features=differing, device_type=None if device is None else str(device)),
    )
