"""The reference of a stored run: every prompt of its greedy cells replayed from the weights
(mtpbench/reference/weights_replay.py) and appended to runs/<id>/reference.jsonl (mtpbench/store/reference_records.py).

What a run asked for is read back from its manifest (pair, k, max_tokens, prompts) and each cell's
cell_start record (the dtype and max_model_len the engine really ran): cells that ran the same numerics
share one replay, and each gets its own lines. The prompts are rebuilt from the config the manifest holds and
must hash to the run's prompt sha256: a prompt file edited since the run would be a reference of other text.
Nothing here prints; a caller may pass `progress` to hear of each step: the pair loading, each batch of
prompts being regenerated (the long part, minutes on a busy 2-core box), each prompt replayed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from mtpbench import __version__
from mtpbench.config import ExperimentConfig, config_prompts
from mtpbench.errors import UserError
from mtpbench.reference.draft_model import replay_draft_model_prompts
from mtpbench.reference.ngram import NgramRule, lookup_bounds
from mtpbench.reference.pair import PairInfo, check_pair, load_pair, torch_threads
from mtpbench.reference.suffix import MIRRORED_ARCTIC_INFERENCE, SuffixParams, suffix_params
from mtpbench.reference.walk import LookupRule
from mtpbench.reference.weights_replay import (
    PromptReplay,
    prompt_token_ids,
    replay_eagle_prompts,
    replay_lookup_prompts,
    replay_prompts,
)
from mtpbench.store.manifest import now_iso
from mtpbench.store.reference_records import ReferenceFile, ReferencePrompt, append_lines, read_reference
from mtpbench.store.results import Run


@dataclass(frozen=True)
class ReferenceOptions:
    """How to replay: on which torch device, with how many CPU threads, how many prompts per batch, and
    optionally other folders for the pair (a host where the run's paths are not the weights' paths)."""

    device: str = "cpu"
    threads: int | None = None
    batch: int = 32
    target: str | None = None
    drafter: str | None = None


class ReplayStage(str, Enum):
    LOADING = "loading"  # the pair being loaded (once per dtype)
    REGENERATING = "regenerating"  # a batch of prompts' greedy text being regenerated
    REPLAYING = "replaying"  # prompts teacher-forced, drafted and walked one by one


@dataclass(frozen=True)
class ReplayProgress:
    """Where a replay is: `done` of `total` prompt replays finished (a prompt counts once per dtype group),
    the stage it is in, and with REGENERATING the number of prompts in the batch being regenerated."""

    done: int
    total: int
    stage: ReplayStage
    batch: int = 0


@dataclass(frozen=True)
class _Numerics:
    dtype: str
    max_model_len: int | None


def _cell_numerics(run: Run) -> dict[str, _Numerics]:
    """Each cell's dtype and max_model_len, as its first cell_start says the engine ran them."""
    out: dict[str, _Numerics] = {}
    for start in run.cell_starts():
        cell = str(start.get("cell"))
        if cell in out:
            continue
        args = start.get("engine_args") or {}
        dtype = str((start.get("effective") or {}).get("dtype") or args.get("dtype") or "auto")
        if dtype == "auto":
            raise UserError(
                f"{run.path}: cell {cell} ran dtype auto and did not record the dtype it chose; "
                "the reference needs the engine's dtype"
            )
        mml = args.get("max_model_len")
        out[cell] = _Numerics(dtype.removeprefix("torch."), int(mml) if mml else None)
    return out


def _prompts(run: Run) -> tuple[list[tuple[str, str]], bool]:
    """(id, text) of the run's prompts in its order, and whether they go through the chat template."""
    from pydantic import ValidationError

    from mtpbench.config import format_validation_error

    cfg_raw = dict(run.manifest.get("config") or {})
    try:
        cfg = ExperimentConfig.model_validate(cfg_raw)
    except ValidationError as exc:
        # The key and what is wrong with it, not pydantic's headline ("1 validation error for ExperimentConfig").
        why = format_validation_error(Path(run.path) / "manifest.json", exc)
        raise UserError(f"{why} (the manifest's config no longer validates)") from None
    ps = config_prompts(cfg)
    if ps.sha256() != run.typed.prompts.sha256:
        raise UserError(
            f"{cfg.prompts}: the prompts changed since run {run.run_id} (sha256 {ps.sha256()[:12]}, the run's "
            f"{run.typed.prompts.sha256[:12]}): the reference must replay the text the engine saw"
        )
    if any(p.followups for p in ps.prompts):
        raise UserError(f"{cfg.prompts}: the reference replays single-turn prompts; this set has conversations")
    return [(p.id, p.text) for p in ps.prompts], ps.chat_template == "chat"


def check_run(run: Run) -> None:
    """Refuse a run the reference cannot replay (one line, exit 2) before any model is loaded."""
    cfg = run.typed.config
    temperature = float(cfg.sampling.temperature or 0.0)
    if temperature > 0:
        raise UserError(
            f"{run.path}: the reference replays greedy decoding; this run samples at temperature {temperature:g}"
        )
    if cfg.sampling.max_tokens is None:
        raise UserError(
            f"{run.path}: the run's max_tokens is not recorded; the reference needs where the engine stopped"
        )


def check_replay(run: Run) -> None:
    """Refuse, in one line, a run the replay cannot take (a lookup's settings it does not model, a suffix tree
    of another arctic-inference or a cross-request cache it cannot replay, a stored config that no longer
    validates, prompts that changed): said before the replay's progress bar starts, not under it."""
    _check_method(run)
    prompts, _ = _prompts(run)
    check_suffix_cache(run, len(prompts))


def check_suffix_cache(run: Run, prompts: int) -> None:
    """A suffix run with the cross-request cache on is replayed as the engine served it only where each engine
    process served the prompts one at a time, in the run's order (sequential mode: a resumed repeat is run
    again whole), and the cache kept every output (no FIFO eviction, which is not modelled)."""
    spec = (run.manifest.get("config") or {}).get("speculative") or {}
    rule = lookup_rule(str(spec.get("method") or ""), dict(spec.get("extra") or {}))
    if not isinstance(rule, SuffixParams) or rule.max_cached_requests == 0:
        return
    cached = rule.max_cached_requests
    why = None
    if cached < prompts:
        why = f"it keeps {cached} outputs, fewer than the run's {prompts} prompts (its evictions are not modelled)"
    for start in run.cell_starts():
        mode = (start.get("prompt_mode") or {}).get("effective")
        if mode != "sequential":
            why = (
                f"cell {start.get('cell')} ran its prompts {mode or 'in an unrecorded mode'}: the cache then holds "
                "the requests as the scheduler interleaved them"
            )
            break
    if why is not None:
        raise UserError(
            f"{run.path}: suffix_decoding_max_cached_requests is {cached} (a cache shared across requests) and "
            f"{why}; the reference replays such a run served sequentially, or a run with it set to 0"
        )


def _check_method(run: Run) -> LookupRule | None:
    """The run's lookup rule (None for a drafter model's method), once its settings and, for suffix, the
    library its cells drafted with are checked."""
    spec = (run.manifest.get("config") or {}).get("speculative") or {}
    method = str(spec.get("method") or "")
    rule = lookup_rule(method, dict(spec.get("extra") or {}))
    if method == "suffix":
        _check_suffix_library(run)
    return rule


def compute_reference(
    run: Run, options: ReferenceOptions = ReferenceOptions(), progress: Callable[[ReplayProgress], None] | None = None
) -> ReferenceFile:
    """Replay every prompt of every cell of `run`, append the lines to its reference.jsonl, and return what
    was written (read back, as every later reader will see it)."""
    check_run(run)
    raw = run.manifest.get("config") or {}
    spec = raw.get("speculative") or {}
    method = str(spec.get("method") or "")
    info = check_pair(options.target or raw.get("model") or "", options.drafter or spec.get("model"), method)
    lookup = _check_method(run)
    max_tokens = int(run.typed.config.sampling.max_tokens or 0)
    ignore_eos = bool(run.typed.config.sampling.ignore_eos)
    prompts, chat = _prompts(run)
    check_suffix_cache(run, len(prompts))
    numerics = _cell_numerics(run)
    cells = list(dict.fromkeys(c.cell for c in run.typed.cells))
    missing = [c for c in cells if c not in numerics]
    if missing:
        raise UserError(f"{run.path}: cell {missing[0]} never started (no cell_start record): nothing to hold against")
    groups = _replay_groups(run, cells, numerics)
    session = now_iso()
    t0, cpu0 = time.perf_counter(), time.process_time()
    replayed = _replayed(run, options, info, method, lookup, groups)
    append_lines(run.path, [{"schema": 1, "type": "reference_start", "session": session, "replayed": replayed}])
    done, total, drafts = 0, len(prompts) * len(groups), 0

    def tell(stage: ReplayStage, batch: int = 0) -> None:
        if progress is not None:
            progress(ReplayProgress(done, total, stage, batch))

    with torch_threads(options.threads):
        for (num, group_k), group_cells in groups.items():
            tell(ReplayStage.LOADING)
            pair = load_pair(info, num.dtype, options.device)
            ids = [prompt_token_ids(pair, text, chat) for _, text in prompts]
            replays = _replays(pair, method, lookup, ids, group_k, max_tokens, num, options.batch, ignore_eos)
            for index, (pid, _) in enumerate(prompts):
                if index % options.batch == 0:
                    # The replay regenerates the next batch's text when it is asked for its first prompt.
                    tell(ReplayStage.REGENERATING, min(options.batch, len(prompts) - index))
                rep = next(replays)
                lines = [_line(cell, pid, rep, group_k).to_json(session) for cell in group_cells]
                append_lines(run.path, lines)
                drafts += rep.walk.num_drafts
                done += 1
                tell(ReplayStage.REPLAYING)
    wall = time.perf_counter() - t0
    # CPU seconds beside the wall: on a shared box the wall says as much about the neighbours as the replay.
    cpu = time.process_time() - cpu0
    append_lines(
        run.path,
        [
            {
                "schema": 1,
                "type": "reference_end",
                "session": session,
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "prompts": done,
                "drafts": drafts,
            }
        ],
    )
    ref = read_reference(run.path)
    if ref is None or ref.session != session:
        raise RuntimeError(f"{Path(run.path) / 'reference.jsonl'}: the session just written does not read back")
    return ref


def _check_suffix_library(run: Run) -> None:
    """Refuse, in one line, a suffix run whose cells drafted with another arctic-inference than the one the
    reference mirrors. A cell that recorded no version for it (a run from before mtpbench recorded it) is not
    refused: what it ran is not known either way."""
    for start in run.cell_starts():
        versions = (start.get("env") or {}).get("versions") or {}
        if "arctic_inference" in versions and versions["arctic_inference"] != MIRRORED_ARCTIC_INFERENCE:
            raise UserError(
                f"{run.path}: cell {start.get('cell')} drafted with arctic-inference {versions['arctic_inference']}; "
                f"the reference mirrors {MIRRORED_ARCTIC_INFERENCE}'s suffix tree (mtpbench/reference/suffix.py)"
            )


def lookup_rule(method: str, extra: dict[str, Any]) -> LookupRule | None:
    """A lookup method's draft rule from the run's speculative passthrough keys (None: a drafter model's
    method); settings vLLM would refuse, or a suffix cache shared across requests, are refused in one line."""
    if method == "ngram":
        return NgramRule(*lookup_bounds(extra))
    if method == "suffix":
        return suffix_params(extra)
    return None


def _replays(
    pair: Any,
    method: str,
    lookup: LookupRule | None,
    ids: list[list[int]],
    k: int,
    max_tokens: int,
    num: _Numerics,
    batch: int,
    ignore_eos: bool,
) -> Any:
    """The replay of `ids` by the method's own draft rule: a lookup's, a draft model's, an EAGLE-3 or EAGLE-1
    head's, or the MTP drafter's (Gemma4 or DeepSeek)."""
    if lookup is not None:
        return replay_lookup_prompts(pair, ids, k, max_tokens, lookup, num.max_model_len, batch, ignore_eos=ignore_eos)
    replays = {"draft_model": replay_draft_model_prompts, "eagle": replay_eagle_prompts, "eagle3": replay_eagle_prompts}
    replay = replays.get(method, replay_prompts)
    return replay(pair, ids, k, max_tokens, num.max_model_len, batch, ignore_eos=ignore_eos)


def _replay_groups(
    run: Run, cells: list[str], numerics: dict[str, _Numerics]
) -> dict[tuple[_Numerics, int], list[str]]:
    """Cells that share numerics and k share one replay; a k sweep's cells each replay with their own k (the
    walk drafts k tokens per step, so the positions, the drafts and the steps all depend on it)."""
    groups: dict[tuple[_Numerics, int], list[str]] = {}
    for cell in cells:
        groups.setdefault((numerics[cell], run.typed.k_of(cell)), []).append(cell)
    return groups


def _replayed(
    run: Run,
    options: ReferenceOptions,
    info: PairInfo,
    method: str,
    lookup: LookupRule | None,
    groups: dict[tuple[_Numerics, int], list[str]],
) -> dict[str, Any]:
    """What the session replayed, as its reference_start line says it: the pair, the versions, the groups."""
    import torch
    import transformers

    return {
        "method": method,
        "target": str(info.target),
        "drafter": None if info.drafter is None else str(info.drafter),
        "target_architecture": info.target_architecture,
        "drafter_architecture": info.drafter_architecture,
        "device": options.device,
        "threads": options.threads,
        "batch": options.batch,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "mtpbench": __version__,
        # A k sweep's list of k (each group says its own); a single-k run's one int, as before.
        "k": run.typed.config.speculative.num_speculative_tokens,
        **(lookup.described() if lookup else {}),
        "max_tokens": int(run.typed.config.sampling.max_tokens or 0),
        "ignore_eos": bool(run.typed.config.sampling.ignore_eos),
        "groups": [
            {"dtype": n.dtype, "max_model_len": n.max_model_len, "cells": cs, **({"k": gk} if run.typed.sweep else {})}
            for (n, gk), cs in groups.items()
        ],
    }


def _line(cell: str, prompt_id: str, rep: PromptReplay, k: int) -> ReferencePrompt:
    w = rep.walk
    return ReferencePrompt(
        cell=cell,
        prompt_id=prompt_id,
        num_prompt_tokens=rep.num_prompt_tokens,
        num_generated_tokens=rep.num_generated_tokens,
        finish_reason=rep.finish_reason,
        output_sha256=rep.output_sha256,
        num_drafts=w.num_drafts,
        num_draft_tokens=w.num_draft_tokens,
        num_accepted_tokens=w.num_accepted_tokens,
        accepted_per_pos=w.accepted_per_pos(k),
        steps=w.accepted,
        target_margin=rep.target_margin,
        draft_margin=rep.draft_margin,
        teacher_forced_mismatches=rep.teacher_forced_mismatches,
    )
