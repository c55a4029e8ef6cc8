"""The one evidence stage: a run's records turned into what every judgement and view reads.

Per cell × repeat × prompt counts (the last record of a prompt within a repeat wins), repeats marked
complete or not (only complete repeats are evidence: status ok and every prompt recorded), identical
greedy repeats of a prompt (same counts, same output sha256) counted once, per-prompt cluster totals
(stats.PromptCounts), pooled counts, counters-only serving cells, and which prompts changed their text.
compare, the serving summary, history, the report's views and `baseline save` all read this module;
none of them reads prompt records itself, so they cannot disagree on what a run measured.

Everything is column operations over the prompt frame (columnar.py): no Python loop per record.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

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
    # per cell-repeat (mtpbench/engine/serving.py), judged by _position_check's counters-only rule.
    counters_only: bool = False
    # A soak cell (engine/soak.py): every round's prompt rows of every repeat, complete or not (a crash in
    # round 9 leaves rounds 0-8 as evidence of drift), with a `round` column; and its round_end records.
    # Everything above is round 0's: the fresh engine's measurement, the one an offline run makes.
    rounds: pd.DataFrame | None = field(default=None, repr=False)
    round_ends: list[dict[str, Any]] = field(default_factory=list, repr=False)

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


# --- collecting -------------------------------------------------------------------------------------

COUNT_COLS = ["num_drafts", "num_draft_tokens", "num_accepted_tokens"]


def _pos_cols(k: int) -> list[str]:
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
    # Ragged or odd vectors: pad with zeros / cut to k; the loaders name bad lengths as bad input.
    arr = pd.DataFrame([list(v) if isinstance(v, (list, tuple, np.ndarray)) else [] for v in vals])
    return arr.reindex(columns=range(k)).fillna(0).to_numpy(dtype=np.int64)


def _dedupe(df: pd.DataFrame, cols: list[str], keep: str = "first") -> pd.DataFrame:
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

    names = ["cell", "repeat", "prompt", "sha", *COUNT_COLS, *_pos_cols(k), "round"]
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
    out = _dedupe(out, ["cell", "repeat", "prompt", "round"], keep="last")
    return _Frame(out, cells, prompts, shas)


SIG = ["prompt", *COUNT_COLS, "sha"]  # with the a{i} columns: what makes two observations of a prompt identical


def _evidence(obs: pd.DataFrame, k: int, names: np.ndarray) -> PromptCounts:
    if not len(obs):
        return PromptCounts.empty(k)
    distinct = _dedupe(obs, [*SIG, *_pos_cols(k)])  # identical repeats of a prompt are one observation
    tot = distinct.groupby("prompt", sort=False)[[*COUNT_COLS, *_pos_cols(k)]].sum()
    return PromptCounts(
        tuple(map(str, names[tot.index.to_numpy()].tolist())),
        tot["num_drafts"].to_numpy(),
        tot["num_draft_tokens"].to_numpy(),
        tot["num_accepted_tokens"].to_numpy(),
        tot[_pos_cols(k)].to_numpy(),
    )


def _outputs(fr: _Frame, code: int, repeat: int) -> dict[str, str]:
    rows = fr.df[(fr.df["cell"].to_numpy() == code) & (fr.df["repeat"].to_numpy() == repeat)]
    return dict(
        zip(fr.prompts[rows["prompt"].to_numpy()].tolist(), fr.shas[rows["sha"].to_numpy()].tolist(), strict=True)
    )


def _counts_row(row: pd.Series, k: int) -> Counts:
    return Counts(
        int(row["num_drafts"]),
        int(row["num_draft_tokens"]),
        int(row["num_accepted_tokens"]),
        tuple(int(row[c]) for c in _pos_cols(k)),
    )


def collect(run: Run, confidence: float = 0.95) -> list[CellResult]:
    manifest = run.typed
    k = manifest.k
    expected = len(manifest.prompts.ids)
    fr = _frame(run, k)
    all_rounds = fr.df
    soak = run.typed.config.workload_kind == "soak" or bool(len(all_rounds) and int(all_rounds["round"].max()) > 0)
    # Every judgement below reads round 0 (the fresh engine); drift (judge/drift.py) reads all rounds.
    df = all_rounds[all_rounds["round"].to_numpy() == 0] if soak else all_rounds
    code_of = {str(c): i for i, c in enumerate(fr.cells)}
    cols = [*COUNT_COLS, *_pos_cols(k)]
    per_rep = df.groupby(["cell", "repeat"], sort=False)
    rep_counts = per_rep[cols].sum()
    rep_prompts = per_rep.size()  # prompts are unique within a repeat (_frame)
    starts = {(r.get("cell"), r.get("repeat")): r for r in run.cell_starts()}
    by_cell: dict[str, list[ManifestCell]] = {}
    for c in manifest.cells:
        by_cell.setdefault(c.cell, []).append(c)
    stride = int(df["repeat"].max()) + 2 if len(df) else 1
    complete_keys: list[int] = []
    repeats: dict[str, list[RepeatResult]] = {}
    for cell, entries in by_cell.items():
        reps: list[RepeatResult] = []
        code = code_of.get(cell, -1)
        for e in sorted(entries, key=lambda e: e.repeat):
            rep = e.repeat
            key = (code, rep)
            n = int(rep_prompts.get(key, 0))
            status = e.status
            # A counters-only serving repeat records one pooled prompt record: that is all of it.
            want = 1 if _counters_only(starts.get((cell, rep), {})) else expected
            done = status == CellStatus.OK and n >= want and n > 0
            if key in rep_counts.index:
                counts = _counts_row(rep_counts.loc[key], k)
            else:
                counts = Counts(accepted_per_pos=(0,) * k)
            reps.append(RepeatResult(rep, e.hash_seed, status, n, done, counts))
            if done and code >= 0:
                complete_keys.append(code * stride + rep)
        repeats[cell] = reps
    keys = df["cell"].to_numpy() * stride + df["repeat"].to_numpy()
    used = df[np.isin(keys, complete_keys)] if complete_keys else df.iloc[0:0]
    for cell, reps in repeats.items():
        for r in reps:
            r.load_outputs = functools.partial(_outputs, fr, code_of.get(cell, -1), r.repeat)
    used_by_cell = {int(c): g for c, g in used.groupby("cell", sort=False)} if len(used) else {}
    out: list[CellResult] = []
    for cell, entries in by_cell.items():
        e0 = entries[0]
        pooled = any(_counters_only(starts.get((cell, e.repeat), {})) for e in entries)
        obs = used_by_cell.get(code_of.get(cell, -1), df.iloc[0:0])
        ev = _evidence(obs, k, fr.prompts)
        reps = repeats[cell]
        first = next((starts[(cell, r.repeat)] for r in reps if (cell, r.repeat) in starts), {})
        walls = [s.get("engine_start_s") for (c, _), s in starts.items() if c == cell and s.get("engine_start_s")]
        code = code_of.get(cell, -1)
        # The runner's clock around each cell-repeat's worker: a batched repeat's prompt records each carry the
        # time from the batch's start, so their sum counted the batch once per prompt (383.7 s for a 68 s cell).
        walls_run = [e.wall_s for e in entries if e.wall_s is not None]
        out.append(
            CellResult(
                cell=cell,
                build=e0.build,
                mode=e0.mode,
                variant=e0.variant,
                summary=summarize(ev, confidence, [r.counts for r in reps if r.complete]),
                repeats=reps,
                evidence=ev,
                observations=obs,
                prompt_names=fr.prompts,
                requested=first.get("requested", {}),
                effective=first.get("effective", {}),
                patches=first.get("patches", []),
                # counters-only: the one pooled record per repeat is all there is to expect
                prompts_expected=1 if pooled else expected,
                engine_start_s=(sum(walls) / len(walls)) if walls else None,
                wall_s=sum(walls_run) if walls_run else None,
                counters_only=pooled,
                rounds=all_rounds[all_rounds["cell"].to_numpy() == code] if soak else None,
                round_ends=[r for r in run.round_ends() if r.get("cell") == cell] if soak else [],
            )
        )
    return out


def _counters_only(cell_start: dict[str, Any]) -> bool:
    return cell_start.get("per_request_metrics") == COUNTERS_ONLY


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
