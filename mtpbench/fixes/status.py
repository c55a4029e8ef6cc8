"""What became of the patches a run asked for: a preflight before it (`run --dry-run`), findings after it.

A variant's patch may refuse the build (`PatchNotApplicable`: the build lacks the code it targets, or
already behaves as fixed) or fail; its cells then measure the unpatched code under the variant's name, so
a `fixed` cell can look like a fixed build when nothing was fixed. `unapplied()` reads a run's
`cell_start` records (each carries every requested patch's outcome) and returns one finding per cell and
patch that did not apply in some repeat; `headline()` says so in one line for the top of a summary, and
loudest when every cell that asked for a fix ran without it. `preflight()` asks each build's interpreter,
before anything runs, what the variants' patches would do there (a patch module's `check()`; no engine
starts). Nothing here prints; `preflight` is the only function that starts a process.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mtpbench.fixes.registry import is_fix, patch_module
from mtpbench.patches.contract import PATCHES_ENV

FIX_NOT_APPLIED = "fix-not-applied"
PATCH_NOT_APPLIED = "patch-not-applied"
_PREFIX = "fix not applied: "


@dataclass(frozen=True)
class Unapplied:
    """One requested patch that did not apply in `repeats` of the `of` recorded repeats of one cell."""

    cell: str
    variant: str
    patch: str
    status: str  # the worst outcome seen: "failed" over "not-applicable"
    repeats: int
    of: int
    details: tuple[str, ...]

    @property
    def kind(self) -> str:
        return FIX_NOT_APPLIED if is_fix(self.patch) else PATCH_NOT_APPLIED

    @property
    def severity(self) -> str:
        # A refusal is the patch working as designed (the build is not the one it fixes, or is fixed
        # already): warn. A patch that raised is a broken measurement of the variant: fail the gate.
        return "fail" if self.status == "failed" else "warn"

    @property
    def message(self) -> str:
        what = "fix not applied" if is_fix(self.patch) else "patch not applied"
        why = "; ".join(d.removeprefix(_PREFIX) for d in self.details)
        return (
            f"{self.patch}: {what} in {self.repeats} of {self.of} repeats ({self.status}: {why}); this cell "
            f"measured the build without it, whatever its variant's name says"
        )


def unapplied(cell_starts: Iterable[Mapping[str, Any]]) -> list[Unapplied]:
    """Every (cell, patch) whose recorded outcome was not `applied` in at least one repeat, in run order."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    repeats: dict[str, set[Any]] = {}
    for rec in cell_starts:
        cell = str(rec.get("cell", "?"))
        repeats.setdefault(cell, set()).add(rec.get("repeat"))
        for outcome in rec.get("patches") or []:
            name = str(outcome.get("name", "?"))
            entry = seen.setdefault(
                (cell, name), {"variant": str(rec.get("variant", "")), "bad": set(), "status": "", "details": []}
            )
            status = str(outcome.get("status", ""))
            if status == "applied":
                continue
            entry["bad"].add(rec.get("repeat"))
            if status == "failed" or not entry["status"]:
                entry["status"] = status
            detail = str(outcome.get("detail", ""))
            if detail not in entry["details"]:
                entry["details"].append(detail)
    return [
        Unapplied(cell, e["variant"], name, e["status"], len(e["bad"]), len(repeats[cell]), tuple(e["details"]))
        for (cell, name), e in seen.items()
        if e["bad"]
    ]


def headline(cell_starts: Iterable[Mapping[str, Any]]) -> str | None:
    """One line for the top of a run summary when a requested fix did not apply; None when all did."""
    records = list(cell_starts)
    asked = sorted({str(r.get("cell")) for r in records for o in r.get("patches") or [] if is_fix(str(o.get("name")))})
    missing = [u for u in unapplied(records) if u.kind == FIX_NOT_APPLIED]
    if not missing:
        return None
    fixes = ", ".join(sorted({u.patch for u in missing}))
    cells = sorted({u.cell for u in missing})
    first = missing[0].details[0].removeprefix(_PREFIX) if missing[0].details else ""
    every = all(u.repeats == u.of for u in missing) and len(cells) == len(asked)
    scope = (
        f"in none of the {len(asked)} cell(s) that asked for it"
        if every
        else (f"in {len(cells)} of the {len(asked)} cell(s) that asked for it")
    )
    return (
        f"FIX NOT APPLIED: {fixes} was applied {scope}; "
        f"{'those cells' if not every else 'every such cell'} measured the unfixed build ({first})"
    )


# The probe run in each build's interpreter (mtpbench/fixes/probe.py): prints one JSON object.
PROBE_MODULE = "mtpbench.fixes.probe"


@dataclass(frozen=True)
class Preflight:
    build: str
    patch: str
    applies: bool | None  # None: the patch has no check(), or the probe itself failed
    detail: str

    @property
    def line(self) -> str:
        if self.applies is None:
            return f"{self.build}: {self.patch}: not checked ({self.detail})"
        if self.applies:
            return f"{self.build}: {self.patch}: would apply: {self.detail}"
        label = "FIX NOT APPLIED" if is_fix(self.patch) else "PATCH NOT APPLIED"
        return f"{label} on build {self.build}: {self.patch}: {self.detail.removeprefix(_PREFIX)}"


def _has_check(name: str) -> bool:
    # Patch modules import only the standard library at module level, so importing one here is cheap and
    # spares a probe process for patches (the fault) that have nothing to check.
    module_name = patch_module(name)
    if module_name is None:
        return False
    try:
        return callable(getattr(importlib.import_module(module_name), "check", None))
    except Exception:  # an unimportable patch module is the worker's to report, not the dry run's
        return False


def preflight(plans: Iterable[Any], timeout_s: float = 300.0) -> list[Preflight]:
    """Ask each build's interpreter what every variant patch would do there; one answer per build and patch.

    `plans` are runner.CellJob-like objects (`cell.build`, `python`, `env`, `job["patches"]`). The probe
    imports what the patch imports (vllm_ascend for the fix) and nothing else: no engine starts.
    """
    out: list[Preflight] = []
    done: set[tuple[str, str]] = set()
    for plan in plans:
        for name in plan.job.get("patches", []):
            key = (plan.cell.build, name)
            if key in done or not _has_check(name):
                continue
            done.add(key)
            env = {**os.environ, **plan.env}
            env.pop(PATCHES_ENV, None)  # the probe must not apply anything through the vLLM plugin hook
            try:
                proc = subprocess.run(
                    [plan.python, "-m", PROBE_MODULE, name],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    check=False,
                )
                answer = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
                out.append(Preflight(plan.cell.build, name, None, f"probe failed: {type(exc).__name__}: {exc}"))
                continue
            if answer is None:
                tail = (proc.stderr.strip().splitlines() or [""])[-1]
                out.append(Preflight(plan.cell.build, name, None, f"probe exited {proc.returncode}: {tail}"))
            elif not answer.get("known"):
                out.append(Preflight(plan.cell.build, name, None, "the patch has no check()"))
            else:
                out.append(Preflight(plan.cell.build, name, bool(answer["applies"]), str(answer["detail"])))
    return out
