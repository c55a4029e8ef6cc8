"""An upstream golden in a baseline file: the numbers an upstream test asserts, in that test's own definition
and with its own tolerance rule, and where they were read (repository, file, commit, date).

A baseline may carry one `upstream:` block beside its entries. `definition` says what the numbers are:
- `pooled`: vLLM's counters summed over all prompts: AL = 1 + Σaccepted / Σdrafts, position i's rate =
  Σaccepted_per_pos[i] / Σdrafts (tests/v1/spec_decode/test_acceptance_length.py, vllm-ascend's e2e tests);
- `per-request-mean`: the mean over requests of each request's AL (1 + accepted / drafts, and 1 for a request
  with no drafts: tests/v1/e2e/spec_decode/utils.py compute_acceptance_len).
The rule's parts are each applied only when set, exactly as the upstream assert is written
(mtpbench/judge/signals/upstream.py): `al_rtol` |AL − g| / g ≤ rtol (two-sided: a gain beyond it fails too);
`al_floor` AL ≥ g × floor; `pos_rtol` rate_i ≥ g_i × (1 − rtol) where g_i > 0; `pos_margin`
rate_i ≥ g_i or g_i − rate_i < margin. Validation refuses a rule part without the golden it needs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mtpbench.specs import Strict

Definition = Literal["pooled", "per-request-mean"]


class UpstreamSource(Strict):
    repository: str = Field(min_length=1, description="owner/name")
    file: str = Field(min_length=1)
    # null only for a golden read from a pull request whose head commit could not be read (notes say why)
    commit: str | None = Field(min_length=7, max_length=40, pattern=r"^[0-9a-f]+$")
    date: str = Field(min_length=1, description="when the commit or pull request was read / published")
    test: str | None = None
    pull_request: str | None = None
    notes: str | None = None

    @model_validator(mode="after")
    def _commit_or_pull_request(self) -> UpstreamSource:
        if self.commit is None and not self.pull_request:
            raise ValueError("commit: give the commit read, or the pull request the golden comes from")
        return self


class UpstreamRule(Strict):
    al_rtol: float | None = Field(None, gt=0, lt=1)
    al_floor: float | None = Field(None, gt=0, le=1)
    pos_rtol: float | None = Field(None, gt=0, lt=1)
    pos_margin: float | None = Field(None, gt=0, lt=1)


class UpstreamGolden(Strict):
    definition: Definition
    al: float | None = Field(None, ge=1.0, description="acceptance length, 1 + accepted per draft")
    per_pos: list[float] | None = Field(None, min_length=1, max_length=64, description="fractions, upstream's units")
    rule: UpstreamRule
    source: UpstreamSource

    @model_validator(mode="after")
    def _rule_has_goldens(self) -> UpstreamGolden:
        r = self.rule
        if all(v is None for v in (r.al_rtol, r.al_floor, r.pos_rtol, r.pos_margin)):
            raise ValueError("rule: give at least one of al_rtol, al_floor, pos_rtol, pos_margin")
        if (r.al_rtol is not None or r.al_floor is not None) and self.al is None:
            raise ValueError("rule: an AL tolerance needs the golden al")
        if (r.pos_rtol is not None or r.pos_margin is not None) and not self.per_pos:
            raise ValueError("rule: a per-position tolerance needs the golden per_pos")
        if self.per_pos and not all(0.0 <= x <= 1.0 for x in self.per_pos):
            raise ValueError(f"per_pos: rates are fractions in [0, 1], got {self.per_pos}")
        if self.definition == "per-request-mean" and self.per_pos:
            # Upstream's per-request tests assert the mean AL only; per-position rates are pooled by nature.
            raise ValueError("per_pos: a per-request-mean golden is an AL only")
        return self
