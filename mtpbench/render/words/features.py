"""The words of the engine-feature findings (judge/signals/features.py): mode-divergence (a mode that differs from the
reference mode in an engine feature accepts differently, paired by prompt) and feature-ignored (a feature
requested but read back otherwise from the engine's config). Sentences only.
"""

from __future__ import annotations

import json
from typing import Any

from mtpbench.judge.findings.features import FeatureChange, FeatureIgnored, FeatureReadBack, ModeDivergence
from mtpbench.render.words.checks import COUNTERS_ONLY_TEXT
from mtpbench.render.words.units import delta_ci, pct, pts
from mtpbench.schema import COUNTERS_ONLY

__all__ = ["features_text", "msg_feature_ignored", "msg_mode_divergence"]


def _value(v: Any) -> str:
    """A config value as YAML writes it (true, 32, FULL_DECODE_ONLY); None: the engine's default, unread."""
    if v is None:
        return "default"
    if isinstance(v, str):
        return v
    return json.dumps(v)


def features_text(changes: list[FeatureChange]) -> str:
    """`enable_prefix_caching=false → true, max_num_seqs=256 → 1`: each override, the reference's value first."""
    return ", ".join(f"{c.name}={_value(c.reference)} → {_value(c.mode)}" for c in changes)


def msg_mode_divergence(n: ModeDivergence) -> str:
    text = (
        "the generated text was not compared (no prompt in common)"
        if n.same_text is None
        else "identical generated text: the target is unaffected, the draft path differs under the feature"
        if n.same_text
        else "generated text differs too: the target's output changed under the feature"
    )
    evidence = (
        f"{pts(n.delta)} pts, beyond the {n.tolerance_pts:g}-pt divergence tolerance; {COUNTERS_ONLY_TEXT}"
        if n.method == COUNTERS_ONLY
        else f"{pts(n.delta)} pts, CI {delta_ci(n.ci)}, {n.prompts} prompts"
    )
    return (
        f"{features_text(n.features)}: mode {n.mode} differs from {n.reference_mode} at the same build and "
        f"variant: pos{n.pos} {pct(n.run_rate)} % vs {pct(n.reference_rate)} % ({evidence}); {text}"
    )


def _read_back(f: FeatureReadBack) -> str:
    got = "was not read back" if f.effective is None else f"ran as {_value(f.effective)}"
    return f"{f.name}={_value(f.requested)} {got}"


def msg_feature_ignored(n: FeatureIgnored) -> str:
    return (
        f"requested {'; '.join(_read_back(f) for f in n.features)} on {n.device_type or 'this platform'}: "
        "this cell did not measure the feature its mode names"
    )
