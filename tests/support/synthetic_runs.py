"""Synthetic runs written in the real on-disk format by the store's RunWriter (for the pure logic of stats,
compare and the CLI; the engine-backed tests live in tests/engine/). `make_run` in tests/conftest.py hands
`write_run` to a test with a fresh folder per run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtpbench.schema import CellStatus
from mtpbench.store.writer import RunWriter

K = 3
PUBLISHED = Path(__file__).resolve().parents[2] / "baselines" / "gemma4-mtp-v0.26.0rc1.yaml"
PROMPTS = ["algorithm", "class", "file-io", "parsing", "unit-test"]
RUN_ID = "20261202T000000Z-synthetic"

Spec = dict[str, Any]


def counts_for(rates_pct: list[float], drafts: int) -> dict[str, Any]:
    """Counts that reproduce the given unconditional per-position rates over `drafts` drafts."""
    per_pos = [round(r / 100 * drafts) for r in rates_pct]
    return {
        "num_drafts": drafts,
        "num_draft_tokens": drafts * len(rates_pct),
        "num_accepted_tokens": sum(per_pos),
        "accepted_per_pos": per_pos,
    }


def split(counts: dict[str, Any], parts: int) -> list[dict[str, Any]]:
    """Spread counts over prompts so that the sums are exact and every prompt's counts are possible
    (per-position counts non-increasing and at most the prompt's drafts; k draft tokens per draft)."""
    out = []
    for i in range(parts):

        def share(v: int, i: int = i) -> int:
            return v // parts + (1 if i < v % parts else 0)

        out.append(
            {
                "num_drafts": share(counts["num_drafts"]),
                # k per draft, as the engine counts them: a share of the total could exceed k × drafts.
                "num_draft_tokens": share(counts["num_drafts"]) * len(counts["accepted_per_pos"]),
                "num_accepted_tokens": share(counts["num_accepted_tokens"]),
                "accepted_per_pos": [share(a) for a in counts["accepted_per_pos"]],
            }
        )
    # The accepted total must equal the per-position sum within each prompt for consistency.
    for o in out:
        o["num_accepted_tokens"] = sum(o["accepted_per_pos"])
    return out


def write_run(
    root: Path,
    cells: dict[str, list[list[float]]],
    *,
    drafts: int = 1000,
    k: int | list[int] = K,
    temperature: float = 0.0,
    method: str = "mtp",
    requested: dict[str, dict[str, Any]] | None = None,
    effective: dict[str, dict[str, Any]] | None = None,
    text: dict[str, list[str]] | None = None,
    statuses: dict[str, list[str]] | None = None,
    seeds: list[int] | None = None,
    baseline: str | None = "published",
    baseline_entry: dict[str, str] | None = None,
    per_prompt: dict[str, list[list[tuple[int, list[int]]]]] | None = None,
    recorded: dict[str, list[int]] | None = None,
    modes: dict[str, dict[str, Any]] | None = None,
    reference_mode: str | None = None,
    reference_build: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """cells: "build/mode/variant" -> one list of per-position rates (%) per repeat.

    The run's config names the published baseline by default (as configs/gemma4-mtp-ascend.yaml does), so
    the published figures may judge it; `baseline=None` writes a config that names no baseline.
    per_prompt: cell -> per repeat -> per prompt (drafts, accepted_per_pos), instead of even rates.
    recorded: cell -> per repeat, how many prompt records were written (a repeat cut off part-way).
    modes: the config's modes as the manifest stores them (mode -> ModeSpec fields), for the feature judge.
    k: a list makes a k sweep (issue 38): each cell's variant then ends in its k (`stock@k3`, run/cells.py).
    extra: the config's speculative.extra (an n-gram lookup's bounds, …), none by default."""
    config = {
        "name": "synthetic",
        "model": "m",
        "speculative": {"method": method, "model": "d", "num_speculative_tokens": k, "extra": extra or {}},
        "sampling": {"temperature": temperature, "top_p": 1.0, "top_k": -1, "max_tokens": 128, "ignore_eos": False},
        "modes": modes or {},
        **({"reference_mode": reference_mode} if reference_mode else {}),
        **({"reference_build": reference_build} if reference_build else {}),
        "gate": {},
        "baseline": str(PUBLISHED) if baseline == "published" else baseline,
        "baseline_entry": baseline_entry or {},
    }
    prompts = {"name": "coding", "sha256": "ab" * 32, "ids": PROMPTS}
    run = RunWriter.create(root / RUN_ID, config=config, config_path="synthetic.yaml", prompts=prompts)
    run.manifest["model"] = {"name": "m", "config_sha256": "cd" * 32, "weights_sha256": "c0" * 32}
    run.manifest["drafter"] = {"name": "d", "config_sha256": "ef" * 32, "weights_sha256": "e0" * 32}
    records: list[dict[str, Any]] = []
    for cell, repeats in cells.items():
        build, mode, variant = cell.split("/")
        cell_k = int(variant.rsplit("@k", 1)[1]) if isinstance(k, list) else k
        for r, rates in enumerate(repeats):
            seed = (seeds or list(range(len(repeats))))[r]
            status = CellStatus((statuses or {}).get(cell, [CellStatus.OK] * len(repeats))[r])
            sweep = {"k": cell_k} if isinstance(k, list) else {}
            i = run.add_cell(build=build, mode=mode, variant=variant, repeat=r, hash_seed=seed, status=status, **sweep)
            req = (requested or {}).get(mode, {"cudagraph_mode": None, "enforce_eager": mode == "eager"})
            eff = (effective or {}).get(mode, {"cudagraph_mode": req.get("cudagraph_mode") or "NONE"})
            records.append(run.record(i, "cell_start", requested=req, effective=eff, patches=[]))
            parts = split(counts_for(rates, drafts), len(PROMPTS))
            if per_prompt and cell in per_prompt:
                parts = [
                    {
                        "num_drafts": d,
                        "num_draft_tokens": d * cell_k,
                        "num_accepted_tokens": sum(a),
                        "accepted_per_pos": list(a),
                    }
                    for d, a in per_prompt[cell][r]
                ]
            n_rec = (recorded or {}).get(cell, [len(parts) if status == CellStatus.OK else 0] * len(repeats))[r]
            for j, part in enumerate(parts[:n_rec]):
                sha = ((text or {}).get(cell) or ["same"] * len(repeats))[r]
                records.append(
                    run.record(
                        i,
                        "prompt",
                        prompt_id=PROMPTS[j],
                        prompt_index=j,
                        **part,
                        num_generated_tokens=128,
                        output_sha256=f"{sha}-{PROMPTS[j]}",
                        wall_s=0.1,
                    )
                )
    # The manifest first, then the records, as before: a reader never sees records of cells it lacks.
    run.save()
    run.append(records)
    return run.path
