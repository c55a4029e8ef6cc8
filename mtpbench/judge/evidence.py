"""The one evidence stage: a run's records turned into what every judgement and view reads.

Per cell × repeat × prompt counts (the last record of a prompt within a repeat wins), repeats marked
complete or not (only complete repeats are evidence: status ok and every prompt recorded), identical
greedy repeats of a prompt (same counts, same output sha256) counted once, per-prompt cluster totals
(stats.PromptCounts), pooled counts, counters-only serving cells, and which prompts changed their text.
Each cell-repeat's cell_start record (with its cell_end's probe observations) becomes a typed `CellMeta`.
`collect_evidence` makes all of it once per command, as an `Evidence`; compare, the serving summary,
history, the report's views and `baseline save` all read that; none of them reads prompt, cell_start or
cell_end records itself, so they cannot disagree on what a run measured.

Everything is column operations over the prompt frame (columnar.py): no Python loop per record.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mtpbench.fixes.status import Unapplied, headline, unapplied
from mtpbench.judge.stats import Counts, PromptCounts, Summary, summarize
from mtpbench.schema import COUNTERS_ONLY, CellStatus
from mtpbench.store.manifest import ManifestCell
from mtpbench.store.results import Run


@dataclass
class RepeatResult:
    repeat: int
    hash_seed: int | None
    status: CellStatus
    prompts: int  # distinct prompts recorded
    complete: bool  # status ok and every prompt recorded: only complete repeats are evidence
    counts: Counts
    # prompt_id -> output sha256, built on first use (a dict per repeat costs seconds over 10^6 records)
    load_outputs: Callable[[], dict[str, str]] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def outputs(self) -> dict[str, str]:
        return self.load_outputs() if self.load_outputs is not None else {}


@dataclass
class CellResult:
    cell: str
    build: str
    mode: str
    variant: str
    summary: Summary
    repeats: list[RepeatResult]
    evidence: PromptCounts = field(repr=False)  # per-prompt cluster totals of the complete repeats
    observations: pd.DataFrame = field(repr=False)  # prompt rows of the complete repeats (integer codes)
    prompt_names: np.ndarray = field(repr=False)  # observations.prompt code -> prompt id
    requested: dict[str, Any] = field(default_factory=dict)
    effective: dict[str, Any] = field(default_factory=dict)
    patches: list[dict[str, Any]] = field(default_factory=list)
    prompts_expected: int = 0
    engine_start_s: float | None = None
    wall_s: float | None = None  # seconds the cell's worker processes ran, summed over its repeats
    # A serving cell whose build returned no per-request counts: its evidence is one pooled /metrics count
    # per cell-repeat (mtpbench/engine/serving.py), judged by position_check's counters-only rule.
    counters_only: bool = False
    # A soak cell (engine/soak.py): every round's prompt rows of every repeat, complete or not (a crash in
    # round 9 leaves rounds 0-8 as evidence of drift), with a `round` column; and its round_end records.
    # Everything above is round 0's: the fresh engine's measurement, the one an offline run makes.
    rounds: pd.DataFrame | None = field(default=None, repr=False)
    round_ends: list[dict[str, Any]] = field(default_factory=list, repr=False)
    # A k sweep's cell (issue 38): its k, which its variant name says too (`stock@k3`); None in a single-k run.
    k: int | None = field(default=None, metadata={"omit_none": True})

    @property
    def statuses(self) -> list[str]:
        return [r.status for r in self.repeats]

    @property
    def complete(self) -> bool:
        return bool(self.repeats) and all(r.complete for r in self.repeats)

    @property
    def used_repeats(self) -> list[RepeatResult]:
        return [r for r in self.repeats if r.complete]

    @property
    def repeats_done(self) -> int:
        """Repeats that count as evidence (status ok and every prompt recorded): what every view shows as
        done, so a repeat whose worker exited ok with prompts missing is not 'done' on one page only."""
        return len(self.used_repeats)

    @property
    def graph_downgraded(self) -> bool:
        req, eff = self.requested.get("cudagraph_mode"), self.effective.get("cudagraph_mode")
        return bool(req) and req != "NONE" and eff == "NONE"


# --- cell metadata ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchOutcome:
    """What one requested patch did in one cell-repeat (patches/__init__.py records it in cell_start)."""

    name: str
    status: str  # applied | not-applicable | failed
    detail: str = ""


@dataclass(frozen=True)
class CellMeta:
    """One cell-repeat's cell_start record, with the probe observations of its cell_end, typed: the only form
    in which anything past this module sees them (the serving summary, the probes' read-outs, the fix
    findings, history's fingerprint, the report's fingerprint table)."""

    cell: str
    repeat: int | None
    hash_seed: int | None
    variant: str
    requested: dict[str, Any] = field(default_factory=dict)
    effective: dict[str, Any] = field(default_factory=dict)
    patches: list[Any] = field(default_factory=list)  # as recorded (the report's fingerprint shows them so)
    env: dict[str, Any] = field(default_factory=dict)  # the worker's environment fingerprint (versions, git sha)
    engine_start_s: float | None = None
    per_request_metrics: str | None = None  # serving: "summary" or counters-only (engine/serving.py)
    per_request_reason: str | None = None
    sampled_expand: dict[str, Any] | None = None  # the sampled-expand kernel probe (worker.sampler_probe)
    # The cell_end's `patch_observations`: probe name -> what it recorded ({} without a cell_end).
    observations: dict[str, Any] = field(default_factory=dict)

    @property
    def outcomes(self) -> list[PatchOutcome]:
        return [
            PatchOutcome(str(p.get("name")), str(p.get("status", "")), str(p.get("detail", "")))
            for p in self.patches
            if isinstance(p, Mapping)
        ]

    def applied(self, name: str) -> bool:
        return any(o.name == name and o.status == "applied" for o in self.outcomes)

    @property
    def counters_only(self) -> bool:
        return self.per_request_metrics == COUNTERS_ONLY

    @property
    def cudagraph_mode(self) -> Any:
        return self.effective.get("cudagraph_mode")


def _dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def cell_meta(starts: Iterable[Mapping[str, Any]], ends: Iterable[Mapping[str, Any]] = ()) -> list[CellMeta]:
    """Every cell_start record typed, in record order, each with the observations of its cell_end (the last
    cell_end of the same cell and repeat)."""
    ends_by = {(e.get("cell"), e.get("repeat")): e for e in ends}
    out: list[CellMeta] = []
    for s in starts:
        end = ends_by.get((s.get("cell"), s.get("repeat"))) or {}
        probe = s.get("sampled_expand")
        out.append(
            CellMeta(
                cell=str(s.get("cell")),
                repeat=s.get("repeat"),
                hash_seed=s.get("hash_seed"),
                variant=str(s.get("variant", "")),
                requested=_dict(s.get("requested")),
                effective=_dict(s.get("effective")),
                patches=list(s.get("patches") or []),
                env=_dict(s.get("env")),
                engine_start_s=s.get("engine_start_s"),
                per_request_metrics=s.get("per_request_metrics"),
                per_request_reason=s.get("per_request_reason"),
                sampled_expand=dict(probe) if isinstance(probe, Mapping) else None,
                observations=_dict(end.get("patch_observations")),
            )
        )
    return out


@dataclass
class Evidence:
    """Everything the judge and the views read of one run, collected once per command (`collect_evidence`):
    the cells, every cell-repeat's typed metadata, and the patches that did not apply."""

    run: Run
    cells: list[CellResult]
    meta: list[CellMeta]  # in record order
    unapplied: list[Unapplied]  # requested patches that did not apply (mtpbench.fixes.status)
    fix_headline: str | None  # one line when a requested fix did not apply (the top of `run`'s summary)
    confidence: float = 0.95

    def meta_of(self, cell: str) -> list[CellMeta]:
        return [m for m in self.meta if m.cell == cell]


# --- collecting -------------------------------------------------------------------------------------

COUNT_COLS = ["num_drafts", "num_draft_tokens", "num_accepted_tokens"]


def pos_cols(k: int) -> list[str]:
    return [f"a{i}" for i in range(k)]


def _per_pos_matrix(values: pd.Series, k: int) -> np.ndarray:
    vals = values.tolist()
    n = len(vals)
    if n == 0:
        return np.zeros((0, k), dtype=np.int64)
    lengths = (
        np.fromiter(map(len, vals), dtype=np.int64, count=n)
        if all(isinstance(v, (list, tuple, np.ndarray)) for v in vals[:1])
        else None
    )
    if lengths is not None and bool((lengths == k).all()):
        # The common case, flattened in one pass (an order of magnitude faster than np.asarray on lists).
        return np.fromiter(itertools.chain.from_iterable(vals), dtype=np.int64, count=n * k).reshape(n, k)
    # Ragged or odd vectors (a k sweep's cells are narrower than its widest k): pad with zeros / cut to k, in
    # one scatter; the loaders name bad lengths as bad input.
    rows = [list(v) if isinstance(v, (list, tuple, np.ndarray)) else [] for v in vals]
    sizes = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(sizes.sum()))
    row = np.repeat(np.arange(n), sizes)
    col = np.arange(len(flat)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    keep = col < k
    out = np.zeros((n, k), dtype=np.int64)
    out[row[keep], col[keep]] = flat[keep]
    return out


def dedupe(df: pd.DataFrame, cols: list[str], keep: str = "first") -> pd.DataFrame:
    """drop_duplicates over many integer columns via one 64-bit row hash (pandas' own hashing)."""
    h = pd.util.hash_pandas_object(df[cols], index=False)
    return df[~h.duplicated(keep=keep).to_numpy()]  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Frame:
    """Prompt records as integer columns: `cell`, `prompt`, `sha` are codes into the name arrays, so
    grouping, de-duplicating and selecting stay numpy operations even over 10^6 records."""

    df: pd.DataFrame
    cells: np.ndarray
    prompts: np.ndarray
    shas: np.ndarray


def _codes(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def _codes_into(values: pd.Series, out: np.ndarray) -> np.ndarray:
    """Write the codes of `values` into `out`; returns the names the codes index."""
    codes, names = _codes(values)
    out[:] = codes
    return names


def _frame(run: Run, k: int) -> _Frame:
    """One row per prompt record with accepted_per_pos spread into columns a0..a{k-1}."""
    df = run.prompt_frame()
    n = len(df)

    def col(name: str) -> pd.Series:
        return df[name] if name in df.columns else pd.Series([None] * n, dtype=object)

    names = ["cell", "repeat", "prompt", "sha", *COUNT_COLS, *pos_cols(k), "round"]
    # Every integer column in one Fortran-ordered block, filled in place: at 10⁶ records, building the
    # frame column by column cost a second of copies and block consolidation.
    ints = np.empty((n, len(names)), dtype=np.int64, order="F")
    cells = _codes_into(col("cell"), ints[:, 0])
    prompts = _codes_into(col("prompt_id"), ints[:, 2])
    shas = _codes_into(col("output_sha256"), ints[:, 3])  # a record without a hash is "unknown", not a KeyError
    ints[:, 1] = pd.to_numeric(col("repeat"), errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    for j, c in enumerate(COUNT_COLS, start=4):
        ints[:, j] = pd.to_numeric(col(c), errors="coerce").fillna(0).to_numpy(dtype=np.int64)
    # The columnar copy (columnar.py) holds the per-position counts as columns: no vectors to flatten.
    copy_cols = [f"acc_pos{i}" for i in range(k)]
    if n and all(c in df.columns for c in copy_cols):
        for i, c in enumerate(copy_cols):
            ints[:, 4 + len(COUNT_COLS) + i] = df[c].to_numpy(dtype=np.int64)
    elif n:
        ints[:, 4 + len(COUNT_COLS) : -1] = _per_pos_matrix(col("accepted_per_pos"), k)
    # A soak's round (engine/soak.py); every other workload's records are round 0.
    ints[:, -1] = pd.to_numeric(col("round"), errors="coerce").fillna(0).to_numpy(dtype=np.int64)
    out = pd.DataFrame(ints, columns=names, copy=False)
    # The reader refuses a prompt recorded twice in one attempt; across attempts the manifest's current one
    # was kept (results.current_attempts). A frame made by hand keeps one record per prompt: the last.
    out = dedupe(out, ["cell", "repeat", "prompt", "round"], keep="last")
    return _Frame(out, cells, prompts, shas)


SIG = ["prompt", *COUNT_COLS, "sha"]  # with the a{i} columns: what makes two observations of a prompt identical


def _evidence(obs: pd.DataFrame, k: int, names: np.ndarray) -> PromptCounts:
    if not len(obs):
        return PromptCounts.empty(k)
    distinct = dedupe(obs, [*SIG, *pos_cols(k)])  # identical repeats of a prompt are one observation
    tot = distinct.groupby("prompt", sort=False)[[*COUNT_COLS, *pos_cols(k)]].sum()
    return PromptCounts(
        ids=tuple(map(str, names[tot.index.to_numpy()].tolist())),
        drafts=tot["num_drafts"].to_numpy(),
        draft_tokens=tot["num_draft_tokens"].to_numpy(),
        accepted=tot["num_accepted_tokens"].to_numpy(),
        per_pos=tot[pos_cols(k)].to_numpy(),
    )


def _outputs(fr: _Frame, code: int, repeat: int) -> dict[str, str]:
    rows = fr.df[(fr.df["cell"].to_numpy() == code) & (fr.df["repeat"].to_numpy() == repeat)]
    return dict(
        zip(fr.prompts[rows["prompt"].to_numpy()].tolist(), fr.shas[rows["sha"].to_numpy()].tolist(), strict=True)
    )


def _counts_row(row: pd.Series, k: int) -> Counts:
    return Counts(
        num_drafts=int(row["num_drafts"]),
        num_draft_tokens=int(row["num_draft_tokens"]),
        num_accepted_tokens=int(row["num_accepted_tokens"]),
        accepted_per_pos=tuple(int(row[col]) for col in pos_cols(k)),
    )


def collect_evidence(run: Run, confidence: float = 0.95) -> Evidence:
    """The run's evidence, collected once: every command (`show`, `compare`, `run`, `report`, `history`,
    `baseline save`) calls this once per run and hands the result on. A k sweep's frame is as wide as its
    largest k; each cell reads its own k's positions."""
    k = run.typed.k
    fr = _frame(run, k)
    all_rounds = fr.df
    soak = run.typed.config.workload_kind == "soak" or bool(len(all_rounds) and int(all_rounds["round"].max()) > 0)
    # Every judgement below reads round 0 (the fresh engine); drift (judge/signals/drift.py) reads all rounds.
    df = all_rounds[all_rounds["round"].to_numpy() == 0] if soak else all_rounds
    starts, ends = run.cell_starts(), run.cell_ends()
    meta = cell_meta(starts, ends)
    meta_at = {(m.cell, m.repeat): m for m in meta}  # the last start of a cell-repeat, as its records say
    by_cell = _by_cell(run)
    repeats = {cell: _repeats(run, fr, df, cell, entries, meta_at) for cell, entries in by_cell.items()}
    used_by_cell = _used_rows(fr, df, repeats)
    round_ends = run.round_ends() if soak else []
    cells = [
        _cell_result(
            run,
            fr,
            entries,
            repeats[cell],
            meta_at,
            used_by_cell.get(_code(fr, cell), df.iloc[0:0]),
            confidence,
            rounds=all_rounds[all_rounds["cell"].to_numpy() == _code(fr, cell)] if soak else None,
            round_ends=[r for r in round_ends if r.get("cell") == cell],
        )
        for cell, entries in by_cell.items()
    ]
    return Evidence(run, cells, meta, unapplied(starts), headline(starts), confidence)


def collect(run: Run, confidence: float = 0.95) -> list[CellResult]:
    """The cells of `collect_evidence` (for a caller that needs nothing else)."""
    return collect_evidence(run, confidence).cells


def _code(fr: _Frame, cell: str) -> int:
    """The cell's code in the frame (-1: it recorded no prompt)."""
    return next((i for i, name in enumerate(fr.cells) if str(name) == cell), -1)


def _by_cell(run: Run) -> dict[str, list[ManifestCell]]:
    by_cell: dict[str, list[ManifestCell]] = {}
    for entry in run.typed.cells:
        by_cell.setdefault(entry.cell, []).append(entry)
    return by_cell


def _repeats(
    run: Run,
    fr: _Frame,
    df: pd.DataFrame,
    cell: str,
    entries: list[ManifestCell],
    meta_at: dict[tuple[str, int | None], CellMeta],
) -> list[RepeatResult]:
    """A cell's repeats in repeat order: status, prompts recorded, whether complete (evidence), counts."""
    k = run.typed.k_of(cell)  # a k sweep's cell: its own k (the frame is as wide as the largest)
    expected = len(run.typed.prompts.ids)
    code = _code(fr, cell)
    rows = df[df["cell"].to_numpy() == code]
    per_rep = rows.groupby("repeat", sort=False)
    rep_counts = per_rep[[*COUNT_COLS, *pos_cols(k)]].sum()
    rep_prompts = per_rep.size()  # prompts are unique within a repeat (_frame)
    reps: list[RepeatResult] = []
    for entry in sorted(entries, key=lambda e: e.repeat):
        recorded = int(rep_prompts.get(entry.repeat, 0))
        # A counters-only serving repeat records one pooled prompt record: that is all of it.
        meta = meta_at.get((cell, entry.repeat))
        want = 1 if meta is not None and meta.counters_only else expected
        done = entry.status == CellStatus.OK and recorded >= want and recorded > 0
        if entry.repeat in rep_counts.index:
            counts = _counts_row(rep_counts.loc[entry.repeat], k)
        else:
            counts = Counts(accepted_per_pos=(0,) * k)
        rep = RepeatResult(
            repeat=entry.repeat,
            hash_seed=entry.hash_seed,
            status=entry.status,
            prompts=recorded,
            complete=done,
            counts=counts,
        )
        rep.load_outputs = functools.partial(_outputs, fr, code, entry.repeat)
        reps.append(rep)
    return reps


def _used_rows(fr: _Frame, df: pd.DataFrame, repeats: dict[str, list[RepeatResult]]) -> dict[int, pd.DataFrame]:
    """The prompt rows of the complete repeats, by cell code: the only rows that are evidence."""
    stride = int(df["repeat"].max()) + 2 if len(df) else 1
    complete_keys = [
        _code(fr, cell) * stride + r.repeat
        for cell, reps in repeats.items()
        for r in reps
        if r.complete and _code(fr, cell) >= 0
    ]
    keys = df["cell"].to_numpy() * stride + df["repeat"].to_numpy()
    used = df[np.isin(keys, complete_keys)] if complete_keys else df.iloc[0:0]
    return {int(c): g for c, g in used.groupby("cell", sort=False)} if len(used) else {}


def _cell_result(
    run: Run,
    fr: _Frame,
    entries: list[ManifestCell],
    reps: list[RepeatResult],
    meta_at: dict[tuple[str, int | None], CellMeta],
    obs: pd.DataFrame,
    confidence: float,
    rounds: pd.DataFrame | None,
    round_ends: list[dict[str, Any]],
) -> CellResult:
    """One cell's evidence from its repeats and its complete repeats' prompt rows."""
    first_entry = entries[0]
    cell = first_entry.cell
    expected = len(run.typed.prompts.ids)
    pooled = any((m := meta_at.get((cell, e.repeat))) is not None and m.counters_only for e in entries)
    evidence = _evidence(obs, run.typed.k_of(cell), fr.prompts)
    first = next((meta_at[(cell, r.repeat)] for r in reps if (cell, r.repeat) in meta_at), None)
    starts = [m.engine_start_s for (c, _), m in meta_at.items() if c == cell and m.engine_start_s]
    # The runner's clock around each cell-repeat's worker: a batched repeat's prompt records each carry the
    # time from the batch's start, so their sum counted the batch once per prompt (383.7 s for a 68 s cell).
    walls = [e.wall_s for e in entries if e.wall_s is not None]
    return CellResult(
        cell=cell,
        build=first_entry.build,
        mode=first_entry.mode,
        variant=first_entry.variant,
        summary=summarize(evidence, confidence, [r.counts for r in reps if r.complete]),
        repeats=reps,
        evidence=evidence,
        observations=obs,
        prompt_names=fr.prompts,
        requested=first.requested if first is not None else {},
        effective=first.effective if first is not None else {},
        patches=first.patches if first is not None else [],
        # counters-only: the one pooled record per repeat is all there is to expect
        prompts_expected=1 if pooled else expected,
        engine_start_s=(sum(starts) / len(starts)) if starts else None,
        wall_s=sum(walls) if walls else None,
        counters_only=pooled,
        rounds=rounds,
        round_ends=round_ends,
        k=first_entry.k,
    )


def changed_text(cells: list[CellResult]) -> set[tuple[str, str]]:
    """(cell, prompt) pairs whose greedy text is not the build's most common text for that prompt (ties: the
    text seen first), over the complete repeats: the target verifies every token, so under greedy decoding a
    build's cells and repeats must all generate the same text. A prompt is changed in a build exactly when
    some pair of the build is listed (compare's text-changed finding, the report's cells table and ≠ marks)."""
    frames = []
    builds = {b: n for n, b in enumerate(dict.fromkeys(c.build for c in cells))}
    for n, c in enumerate(cells):
        if len(c.observations):
            frames.append(c.observations[["prompt", "sha"]].assign(cell=n, build=builds[c.build]))
    if not frames:
        return set()
    # Back in record order (the observations keep the prompt frame's row numbers): ties go to the text recorded
    # first, whichever cell recorded it.
    obs = pd.concat(frames).sort_index(kind="stable").reset_index(drop=True)
    n_texts = obs.groupby(["build", "prompt"], sort=False)["sha"].nunique()
    suspect = n_texts[n_texts > 1].index
    if not len(suspect):
        return set()
    obs = obs.set_index(["build", "prompt"]).loc[suspect].reset_index()
    counts = obs.groupby(["build", "prompt", "sha"], sort=False).size().reset_index(name="n")
    # Stable sort: among equally common texts the one seen first stays first.
    common = counts.sort_values("n", ascending=False, kind="stable").drop_duplicates(["build", "prompt"])
    obs = obs.merge(common[["build", "prompt", "sha"]].rename(columns={"sha": "common"}), on=["build", "prompt"])
    odd = obs[obs["sha"] != obs["common"]].drop_duplicates(["cell", "prompt"])
    names = cells[0].prompt_names
    return {(cells[int(c)].cell, str(names[int(p)])) for c, p in zip(odd["cell"], odd["prompt"], strict=True)}
