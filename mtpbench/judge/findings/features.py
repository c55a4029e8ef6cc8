"""The engine-feature findings' payloads (judge/signals/features.py fills them): a mode that diverges from the reference
mode where the two differ in an engine feature (`mode-divergence`), and a feature the engine was asked for but
read back otherwise (`feature-ignored`). Beside findings/__init__.py, whose Kind enum names them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mtpbench.judge.findings import Divergence, Payload


@dataclass(frozen=True)
class FeatureChange:
    """One engine override that differs between a mode and the reference mode. A value the mode's config does
    not set is the one the engine read back for that cell (None: neither said, the engine's default)."""

    name: str
    reference: Any
    mode: Any


@dataclass(frozen=True, kw_only=True)
class ModeDivergence(Divergence):
    """A mode against the reference mode of the same build and variant, paired by prompt as graph divergence
    is, where the two modes differ in an engine feature: `features` names what differs."""

    check: str = "mode-divergence"
    features: list[FeatureChange]


@dataclass(frozen=True)
class FeatureReadBack:
    """One engine feature as requested (the mode's engine arguments) and as the engine's config read it back
    (engine/fingerprint.py effective_config; None: not read back, a build or record that does not say)."""

    name: str
    requested: Any
    effective: Any


@dataclass(frozen=True, kw_only=True)
class FeatureIgnored(Payload):
    """Engine features a cell asked for that its engine ran otherwise (or did not say): the cell measured
    another engine than its mode names, so its divergence from the reference says nothing about that feature."""

    features: list[FeatureReadBack]
    device_type: str | None
