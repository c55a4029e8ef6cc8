"""Baselines (`baselines/*.yaml`): per-position rates (and raw counts when they came from a run), keyed
by build/mode, with provenance and the fingerprint that decides what they can be compared with.

A published baseline (figures from a report, no counts) leaves unknown fingerprint fields null: they are
then listed as "not checked", and such a baseline is used only when the run's config names it or the user
says so (compare.py). A baseline saved from a run carries the run's counts, pooled and per
prompt, so the comparison is prompt-paired instead of treating the baseline as exact. Saved counts are
the evidence: identical repeats of a prompt count once (older saves pooled every repeat).

Loading validates what a gate will trust: rates are finite percentages that do not grow with the
position, counts are possible (the same rules as a run's records: `records.count_problem`), every entry
has k positions and its rates agree with its counts. Any problem is a UserError naming the file and key.

Format history (`schema.BASELINE_SCHEMA`): schema 1 (mtpbench 0.1) is the only one; another schema is
refused with a message saying whether the file is newer or older than this mtpbench.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, PositiveInt, StrictInt, ValidationError, field_validator, model_validator

from mtpbench import __version__
from mtpbench.config import format_validation_error, path_kind, read_yaml
from mtpbench.errors import UserError
from mtpbench.schema import BASELINE_SCHEMA, schema_problem
from mtpbench.specs import KAxis, Strict, k_or_ks
from mtpbench.store.manifest import MAX_STORED_K, KValue, now_iso
from mtpbench.store.records import MAX_COUNT, Counts, count_problem
from mtpbench.store.results import Run
from mtpbench.store.upstream import UpstreamGolden
from mtpbench.weights import weights_sha256

__all__ = ["BASELINE_SCHEMA", "Baseline", "BaselineEntry", "load_baseline"]

# Rates saved from counts are rounded to 3 decimals: a larger gap means the file was edited by hand.
RATE_SLACK_PTS = 0.01


class BaselineCounts(Strict):
    num_drafts: StrictInt = Field(ge=0, le=MAX_COUNT)
    num_draft_tokens: StrictInt = Field(ge=0, le=MAX_COUNT)
    num_accepted_tokens: StrictInt = Field(ge=0, le=MAX_COUNT)
    accepted_per_pos: list[StrictInt] = Field(max_length=64)


class ServingBaselineEntry(Strict):
    """A serving entry's load and what it achieved (mtpbench/judge/signals/serving_summary.py reads it). Fields a
    published figure does not give stay null; `not_checked` names what a run cannot be checked against."""

    # a list: the run swept these levels (judge/signals/concurrency.py)
    concurrency: PositiveInt | list[PositiveInt]
    num_requests: int | None = Field(None, gt=0)
    max_tokens: int | None = Field(None, gt=0)
    request_rate: float | None = Field(None, gt=0)
    requests_ok: int | None = Field(None, ge=0)
    requests_total: int | None = Field(None, ge=0)
    req_per_s: float | None = Field(None, gt=0)
    output_tok_per_s: float | None = None
    ttft_p50_ms: float | None = None
    tpot_p50_ms: float | None = None
    mean_request_al: float | None = None
    not_checked: list[str] = Field(default_factory=list)


class BaselineEntry(Strict):
    build: str = Field("*", min_length=1)
    mode: str = Field("*", min_length=1)
    # None only in a published baseline whose upstream golden is an AL alone (its `upstream` block judges it).
    rates_pct: list[float] | None = Field(
        min_length=1, max_length=64, description="unconditional per-position acceptance, %"
    )
    mean_pct: float | None = Field(None, ge=0.0, le=100.0)
    avg_accepted: float | None = Field(None, ge=0.0)
    counts: BaselineCounts | None = None
    # Per-prompt cluster totals (identical repeats counted once), keyed by prompt id: what a prompt-paired
    # comparison needs. Absent in published baselines and in saves before mtpbench 0.2.
    prompts: dict[str, BaselineCounts] | None = None
    repeats: StrictInt | None = Field(None, gt=0, le=10_000)
    # Set on entries measured with the serving workload; a serving run is only compared with these.
    serving: ServingBaselineEntry | None = None
    # A k sweep's entry (issue 38): the k it was measured at; each k's cell meets only its own k's entries.
    # None: the fingerprint's one k.
    k: StrictInt | None = Field(None, gt=0, le=64)

    @model_validator(mode="after")
    def _consistent(self) -> BaselineEntry:
        if self.rates_pct is None:
            if self.counts is not None or self.prompts:
                raise ValueError("rates_pct: counts need the rates they give")
            return self
        if any(r < 0 or r > 100 for r in self.rates_pct):
            raise ValueError(f"rates_pct: rates are percentages in 0..100, got {self.rates_pct}")
        if any(b > a for a, b in itertools.pairwise(self.rates_pct)):
            raise ValueError(f"rates_pct: {self.rates_pct} grows with the position (acceptance is a prefix)")
        if self.avg_accepted is not None and self.avg_accepted > len(self.rates_pct):
            raise ValueError(f"avg_accepted: {self.avg_accepted} accepted of {len(self.rates_pct)} drafted per step")
        for pid, pc in (self.prompts or {}).items():
            why = count_problem(Counts.model_validate(pc.model_dump()), len(self.rates_pct))
            if why:
                raise ValueError(f"prompts.{pid}: impossible counts: {why}")
        if self.prompts:
            # The per-prompt counts are what a paired comparison uses: they must say what rates_pct says.
            drafts = sum(pc.num_drafts for pc in self.prompts.values())
            for i, rate in enumerate(self.rates_pct):
                acc = sum(pc.accepted_per_pos[i] for pc in self.prompts.values())
                from_prompts = 100.0 * acc / drafts if drafts else 0.0
                if abs(rate - from_prompts) > RATE_SLACK_PTS:
                    raise ValueError(
                        f"rates_pct: position {i} says {rate} % but the per-prompt counts give "
                        f"{from_prompts:.3f} % ({acc}/{drafts})"
                    )
        if self.counts is None:
            return self
        c = self.counts
        why = count_problem(Counts.model_validate(c.model_dump()), len(self.rates_pct))
        if why:
            raise ValueError(f"counts: impossible counts: {why}")
        for i, (rate, a) in enumerate(zip(self.rates_pct, c.accepted_per_pos, strict=True)):
            from_counts = 100.0 * a / c.num_drafts if c.num_drafts else 0.0
            if abs(rate - from_counts) > RATE_SLACK_PTS:
                raise ValueError(
                    f"rates_pct: position {i} says {rate} % but counts give {from_counts:.3f} % ({a}/{c.num_drafts})"
                )
        return self


class Provenance(Strict):
    source: str = Field(min_length=1, description="where the numbers came from")
    date: str | None = None
    measured_on: str | None = None
    run_id: str | None = None
    command: str | None = None
    tool_version: str | None = None
    notes: str | None = None


class BaselineFingerprint(KAxis, Strict):
    model: str | None = None
    model_config_sha256: str | None = None
    drafter_config_sha256: str | None = None
    # Digests of the weight files (mtpbench.weights); null = not checked (e.g. a published baseline).
    model_weights_sha256: str | None = None
    drafter_weights_sha256: str | None = None
    method: str
    # A list: a k sweep's baseline, every entry naming its k (issue 38); one int before.
    num_speculative_tokens: KValue | list[KValue]
    # The method's own settings the run passed to vLLM (its config's `speculative.extra`: an n-gram lookup's
    # prompt_lookup_min/max, …): another lookup measures another proposer. Null: a baseline saved before the
    # field existed, or a published one: not recorded (judge/checks.py check_comparable says what that means).
    speculative_extra: dict[str, Any] | None = None
    prompts_sha256: str | None = None
    # How many prompts the numbers pool: what `mtpbench size` judges a baseline without per-prompt counts by
    # (a published golden's prompt set). Null: unknown (its per-prompt counts, when it has them, say it).
    prompt_count: StrictInt | None = Field(None, gt=0)
    sampling: dict[str, Any] = Field(default_factory=dict)

    @field_validator("num_speculative_tokens", mode="plain")
    @classmethod
    def _k_or_ks(cls, v: Any) -> int | list[int]:
        return k_or_ks(v, MAX_STORED_K)


class Baseline(Strict):
    schema_version: StrictInt = Field(alias="schema")
    name: str
    provenance: Provenance
    fingerprint: BaselineFingerprint
    entries: list[BaselineEntry] = Field(min_length=1)
    # An upstream test's golden, definition and tolerance rule (store/upstream.py; judge/signals/upstream.py applies
    # it).
    upstream: UpstreamGolden | None = None

    def entry_for(
        self, build: str, mode: str, cudagraph_mode: str | None = None, k: int | None = None
    ) -> BaselineEntry | None:
        """The entry judging a cell of `build`/`mode` (and, in a k sweep, `k`): exact keys first, then
        wildcards and the requested graph mode."""
        keys = [(build, mode), ("*", mode)]
        if cudagraph_mode:
            keys += [(build, cudagraph_mode), ("*", cudagraph_mode)]
        keys += [(build, "*"), ("*", "*")]
        for b, m in keys:
            for e in self.entries:
                if e.build == b and e.mode == m and same_k(e, k):
                    return e
        return None


def same_k(entry: BaselineEntry, k: int | None) -> bool:
    """Whether an entry may judge a cell at `k`: an entry without a k (a single-k baseline, whose k the
    comparability check already held against the run's) judges any cell; one with a k only that k's cells."""
    return entry.k is None or k is None or entry.k == k


def load_baseline(path: str | Path) -> Baseline:
    path = Path(path)
    data = read_yaml(path, "baseline")
    problem = schema_problem(data.get("schema"), BASELINE_SCHEMA, "baseline")
    if problem:
        raise UserError(f"{path}: {problem}")
    try:
        b = Baseline.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(path, exc)) from None
    fp = b.fingerprint
    for i, e in enumerate(b.entries):
        if e.rates_pct is None and b.upstream is None:
            raise UserError(f"{path}: entries.{i}.rates_pct: missing, and no upstream golden to judge by")
        if fp.sweep and (e.k is None or e.k not in fp.ks):
            raise UserError(f"{path}: entries.{i}.k: {e.k!r}: a k sweep's entry names one of its k {fp.ks}")
        if not fp.sweep and e.k is not None and e.k != fp.num_speculative_tokens:
            raise UserError(f"{path}: entries.{i}.k: {e.k}, but the fingerprint says k={fp.num_speculative_tokens}")
        k = e.k if e.k is not None else fp.num_speculative_tokens
        if e.rates_pct is not None and len(e.rates_pct) != k:
            raise UserError(
                f"{path}: entries.{i}.rates_pct: entry {e.build}/{e.mode} has {len(e.rates_pct)} positions, "
                f"{'its k is' if e.k is not None else 'fingerprint says'} k={k}"
            )
    up = b.upstream
    if up is not None and fp.sweep:
        raise UserError(f"{path}: upstream: an upstream golden is of one k, not of a k sweep {fp.ks}")
    if up is not None and up.per_pos and len(up.per_pos) != b.fingerprint.num_speculative_tokens:
        raise UserError(
            f"{path}: upstream.per_pos: {len(up.per_pos)} positions, fingerprint says "
            f"k={b.fingerprint.num_speculative_tokens}"
        )
    return b


def model_identity(model: str | None) -> dict[str, str | None]:
    """Name, config.json hash and weights digest of a local model dir; a hub id keeps its name only.

    The weights digest is what tells a retrained model with an unchanged config.json apart; it is cached
    by file path, size and mtime (mtpbench.weights), so an unchanged model is not reread.
    """
    if not model:
        return {"name": None, "config_sha256": None, "weights_sha256": None}
    p = Path(model)
    sha = None
    cfg = p / "config.json"
    if cfg.is_file():
        sha = hashlib.sha256(cfg.read_bytes()).hexdigest()
    return {"name": p.name if p.exists() else model, "config_sha256": sha, "weights_sha256": weights_sha256(p)}


def run_fingerprint(run: Run) -> dict[str, Any]:
    cfg = run.manifest["config"]
    spec = cfg["speculative"]
    return {
        "model": run.manifest.get("model", {}).get("name") or cfg["model"],
        "model_config_sha256": run.manifest.get("model", {}).get("config_sha256"),
        "drafter_config_sha256": run.manifest.get("drafter", {}).get("config_sha256"),
        "model_weights_sha256": run.manifest.get("model", {}).get("weights_sha256"),
        "drafter_weights_sha256": run.manifest.get("drafter", {}).get("weights_sha256"),
        "method": spec["method"],
        "num_speculative_tokens": spec["num_speculative_tokens"],
        "speculative_extra": dict(spec.get("extra") or {}),
        "prompts_sha256": run.manifest["prompts"]["sha256"],
        "sampling": cfg["sampling"],
    }


class _Dumper(yaml.SafeDumper):
    """Block style, except a list of numbers stays on one line (rate and count vectors)."""


def _list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(isinstance(x, (int, float)) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _list)


def dump_baseline(b: Baseline) -> str:
    data = b.model_dump(mode="json", by_alias=True, exclude_none=True)
    header = (
        f"# mtpbench baseline (schema {BASELINE_SCHEMA}). Rates are unconditional per-position acceptance in %\n"
        "# (accepted_per_pos[i] / num_drafts); counts are the raw sums they were computed from.\n"
    )
    return header + yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=110)


def write_baseline(b: Baseline, out: Path, force: bool) -> None:
    kind = path_kind(out, "a baseline file")
    if kind == "dir":
        raise UserError(f"{out}: is a folder, not a baseline file")
    if kind != "missing" and not force:
        raise UserError(f"{out}: exists; pass --force to overwrite")
    if path_kind(out.parent, "a folder") != "dir":
        raise UserError(f"{out.parent}: no such folder")
    text = dump_baseline(b)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:  # temp file + rename: a failed write leaves the old baseline, never half of a new one
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{out}: cannot write the baseline: {exc.strerror or exc}") from None


def baseline_from_cells(
    run: Run,
    name: str,
    per_cell: list[tuple[str, str, dict[str, Any], int, dict[str, dict[str, Any]] | None]],
    source: str | None = None,
    variant: str | None = None,
    serving: dict[tuple[str, str], dict[str, Any] | None] | None = None,
    ks: list[int | None] | None = None,
) -> Baseline:
    """per_cell: (build, mode, counts dict, repeats, per-prompt counts dicts or None) — variants are pooled
    by the caller's choice; `serving`: per (build, mode) a serving entry's fields (save.baseline_of_run);
    `ks`: a k sweep's k of each of per_cell's cells (its entries then name their k)."""
    fp = run_fingerprint(run)
    entries = []
    cell_ks = ks if ks is not None else [None] * len(per_cell)
    for (build, mode, counts, repeats, prompts), k in zip(per_cell, cell_ks, strict=True):
        d = counts["num_drafts"]
        if d <= 0:
            continue
        rates = [round(100.0 * a / d, 3) for a in counts["accepted_per_pos"]]
        fields = (serving or {}).get((build, mode))
        entries.append(
            BaselineEntry(
                build=build,
                mode=mode,
                rates_pct=rates,
                mean_pct=round(100.0 * counts["num_accepted_tokens"] / max(counts["num_draft_tokens"], 1), 3),
                avg_accepted=round(counts["num_accepted_tokens"] / d, 4),
                counts=BaselineCounts(**counts),
                prompts={p: BaselineCounts(**c) for p, c in prompts.items()} if prompts else None,
                repeats=repeats,
                serving=ServingBaselineEntry(**fields) if fields else None,
                k=k,
            )
        )
    if not entries:
        raise UserError(f"{run.path}: no cell with drafts to save as a baseline")
    env = next((r.get("env", {}) for r in run.cell_starts()), {})
    versions = env.get("versions", {})
    measured_on = ", ".join(x for x in (env.get("device"), *(f"{k} {v}" for k, v in versions.items() if v)) if x)
    return Baseline.model_validate(
        {
            "schema": BASELINE_SCHEMA,
            "name": name,
            "provenance": {
                "source": source or f"mtpbench run {run.run_id}",
                "date": now_iso(),
                "measured_on": measured_on or None,
                "run_id": run.run_id,
                "command": "; ".join(
                    c for c in (run.manifest.get("command"), f"mtpbench baseline save {run.path.name}") if c
                ),
                "tool_version": __version__,
            },
            "fingerprint": {
                **{k: v for k, v in fp.items() if k != "model" or v},
                "sampling": {k: v for k, v in fp["sampling"].items() if v is not None},
            },
            "entries": [e.model_dump() for e in entries],
        }
    )
