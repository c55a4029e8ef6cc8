"""The build-divergence finding's payload (judge/signals/builds.py fills it): a build against the reference build of the
run (`reference_build`, default the first listed) at the same mode and variant, paired by prompt as graph and
mode divergence are. Beside findings/__init__.py, whose Kind enum names it."""

from __future__ import annotations

from dataclasses import dataclass

from mtpbench.judge.findings import Divergence


@dataclass(frozen=True, kw_only=True)
class BuildDivergence(Divergence):
    """`reference`, `pos`, `delta`, `ci` and `prompts` are divergence's (the prompts both builds measured);
    `build` and `reference_build` name the two builds; `differing` the prompts whose accepted count at `pos`
    differs between them, the largest drops first (the first ten; `prompts_differing` counts them all)."""

    check: str = "build-divergence"
    build: str
    reference_build: str
    prompts_differing: int
    differing: list[str]
