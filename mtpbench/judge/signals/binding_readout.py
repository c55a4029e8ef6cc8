"""The metadata-binding probe's read-out (mtpbench/patches/probes/metadata_binding.py): per cell, which KV-cache group
each draft layer read in each draft step, and the findings it supports.

The worker stores the probe's table in each repeat's cell_end record (`patch_observations`). Here it is
read back per cell (`bindings_from`, from the evidence stage's typed cell metadata), folded into a layer ×
group grid for the report, and judged:
- `metadata-binding` (FAIL, exit 1): some draft layer consumed another group's metadata (or metadata of no
  group of its step) in some draft step, or "its own" metadata holding another group's block table, or read
  the KV of a target layer other than the one Gemma4 MTP defines for it: which layer, its type, the group (or
  target layer) it read, the one it should have read, in how many steps and under which PYTHONHASHSEEDs; the
  layers bound correctly are listed too, and which target layer's KV each draft layer read.

The KV a draft layer should read is the model's definition, not the proposer's: each Gemma4 MTP draft layer
reads the KV of the last target layer of its own attention type that owns its KV (not KV-shared itself), as
transformers' Gemma4 computes it (`return_shared_kv_states`, which the reference replay uses:
mtpbench/reference/weights_replay.py) and as vLLM 0.32's gemma4.py `_setup_gemma4_kv_sharing` documents it.
- `metadata-binding-unobserved` (WARN): the probe was applied but recorded no draft step in some repeat,
  so nothing was verified there;
- `fix-verification` (INFO / WARN): for a cell whose variant applied a shipped fix, whether the probe shows
  every draft layer bound to its own group ("applied and verified") or could not say so.
Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mtpbench.fixes.status import is_fix
from mtpbench.judge.evidence import CellMeta
from mtpbench.judge.findings import Cause, Finding, Kind, Severity
from mtpbench.judge.findings.probes import (
    BindingUnobserved,
    FixVerification,
    KvRead,
    LayerBinding,
    MetadataBinding,
)

PROBE = "metadata-binding"
UNIDENTIFIED = "unidentified"


@dataclass(frozen=True)
class RepeatBinding:
    repeat: int | None
    hash_seed: int | None
    proposes: int
    groups: list[dict[str, Any]]  # {"id", "type", "layers"}
    # name -> {"own_group", "type", "steps": [{group: count}], "layer_type", "tables": [{group: count}],
    # "kv": {target layer: count}}; the last three only in records of the probe since issue 34.
    layers: dict[str, dict[str, Any]]
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)  # target layer -> {"type", "owns_kv"}

    def reads(self, layer: str) -> dict[str, int]:
        """Group (as str) -> draft steps in which `layer` read its metadata, over all draft positions."""
        return _summed(self.layers.get(layer, {}).get("steps") or [])

    def table_reads(self, layer: str) -> dict[str, int]:
        """Group (as str) -> draft steps in which `layer`'s metadata held that group's true block table."""
        return _summed(self.layers.get(layer, {}).get("tables") or [])

    def kv_reads(self, layer: str) -> dict[str, int]:
        """Target layer -> draft steps in which `layer` read its KV."""
        return dict(self.layers.get(layer, {}).get("kv") or {})

    def own_type(self, layer: str) -> str:
        """The draft layer's own attention type: its module's where recorded (a fault can move a layer into
        another type's group), else its group's."""
        info = self.layers.get(layer, {})
        return str(info.get("layer_type") or info.get("type") or "")

    def expected_kv(self, layer: str) -> str | None:
        """The last target layer of the draft layer's own type that owns its KV (the model's definition)."""
        kind = self.own_type(layer)
        owners = [n for n, t in self.targets.items() if t.get("owns_kv") and t.get("type") == kind]
        return max(owners, key=_layer_key) if owners else None

    @property
    def observed(self) -> bool:
        return self.proposes > 0 and any(self.reads(name) for name in self.layers)


@dataclass
class CellBinding:
    cell: str
    variant: str
    repeats: list[RepeatBinding] = field(default_factory=list)
    missing: list[tuple[int | None, int | None, str]] = field(default_factory=list)  # (repeat, seed, why)
    fixes: list[str] = field(default_factory=list)  # shipped fixes applied in every repeat of the cell
    # Graphs ran (effective cudagraph_mode not NONE): a replayed draft graph runs on the params its tasks were
    # bound to, which this probe does not read (patches/probes/metadata_binding_tasks.py is not wired in), so it cannot
    # verify.
    graph_effective: bool = False

    @property
    def layers(self) -> list[str]:
        names = {n for r in self.repeats for n in r.layers}
        return sorted(names, key=_layer_key)

    @property
    def groups(self) -> list[tuple[str, str]]:
        """(group id, attention type) of every group seen, in id order, plus "unidentified" if it was read."""
        seen: dict[str, str] = {}
        for r in self.repeats:
            for g in r.groups:
                seen.setdefault(str(g.get("id")), str(g.get("type", "")))
        read = {g for r in self.repeats for n in r.layers for g in r.reads(n)}
        if UNIDENTIFIED in read:
            seen[UNIDENTIFIED] = ""
        return sorted(seen.items(), key=lambda kv: (kv[0] == UNIDENTIFIED, _int_or(kv[0])))

    def grid(self) -> dict[str, dict[str, int]]:
        """Layer -> group -> draft steps it read that group in, summed over positions and repeats."""
        out: dict[str, dict[str, int]] = {}
        for r in self.repeats:
            for name in r.layers:
                row = out.setdefault(name, {})
                for g, n in r.reads(name).items():
                    row[g] = row.get(g, 0) + n
        return out

    def own(self, layer: str) -> tuple[int | None, str]:
        for r in self.repeats:
            if layer in r.layers:
                info = r.layers[layer]
                return info.get("own_group"), str(info.get("type", ""))
        return None, ""

    def document(self) -> dict[str, Any]:
        """Plain data for the JSON report and the HTML grid: per draft layer, its own group and, per repeat
        (PYTHONHASHSEED) and draft step, the group(s) it read and in how many proposes."""
        return {
            "verified": self.verified,
            "graph_effective": self.graph_effective,
            "groups": [{"id": g, "type": t} for g, t in self.groups],
            "repeats": [{"PYTHONHASHSEED": r.hash_seed, "proposes": r.proposes} for r in self.repeats],
            "unobserved": [{"PYTHONHASHSEED": seed, "why": why} for _, seed, why in self.missing],
            "layers": [
                {
                    "layer": name,
                    "own_group": self.own(name)[0],
                    "type": self.own(name)[1],
                    "reads": self.grid().get(name, {}),
                    "steps_by_seed": {str(r.hash_seed): r.layers.get(name, {}).get("steps", []) for r in self.repeats},
                    "tables_by_seed": {str(r.hash_seed): r.table_reads(name) for r in self.repeats},
                    "kv_by_seed": {str(r.hash_seed): r.kv_reads(name) for r in self.repeats},
                    "expected_kv": next((r.expected_kv(name) for r in self.repeats if r.targets), None),
                }
                for name in self.layers
            ],
        }

    @property
    def verified(self) -> bool:
        """Every repeat observed, every layer read only its own group in every step, no graph replayed."""
        if self.graph_effective or not self.repeats or self.missing or not all(r.observed for r in self.repeats):
            return False
        for name, row in self.grid().items():
            own, _ = self.own(name)
            if set(row) != {str(own)}:
                return False
        return not _wrong_tables(self) and not _wrong_kv(self)


def _summed(steps: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for step in steps:
        for group, n in step.items():
            out[str(group)] = out.get(str(group), 0) + int(n)
    return out


def _int_or(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 1 << 30


def _layer_key(name: str) -> tuple[int, str]:
    digits = name.split(".layers.")[1].split(".")[0] if ".layers." in name else ""
    return (int(digits) if digits.isdigit() else 1 << 30, name)


def bindings_from(meta: Iterable[CellMeta]) -> dict[str, CellBinding]:
    """The probe's tables of every cell that applied it, by cell, repeats in run order (evidence.Evidence.meta)."""
    out: dict[str, CellBinding] = {}
    fix_repeats: dict[str, dict[str, int]] = {}
    meta = list(meta)
    for m in meta:
        for p in m.outcomes:
            if is_fix(p.name) and p.status == "applied":
                fix_repeats.setdefault(m.cell, {}).setdefault(p.name, 0)
                fix_repeats[m.cell][p.name] += 1
        if not m.applied(PROBE):
            continue
        entry = out.setdefault(m.cell, CellBinding(m.cell, m.variant))
        mode = m.cudagraph_mode
        entry.graph_effective |= mode is not None and str(mode) != "NONE"
        seed, repeat = m.hash_seed, m.repeat
        obs = m.observations.get(PROBE)
        if not isinstance(obs, Mapping):
            entry.missing.append((repeat, seed, "no-record"))
        elif "error" in obs:
            entry.missing.append((repeat, seed, f"error: {obs['error']}"))
        else:
            rb = _parse(repeat, seed, obs)
            if rb is None:
                entry.missing.append((repeat, seed, "malformed record"))
                continue
            entry.repeats.append(rb)
            if not rb.observed:
                entry.missing.append((repeat, seed, "no-draft-step"))
    n_repeats: dict[str, int] = {}
    for m in meta:
        n_repeats[m.cell] = n_repeats.get(m.cell, 0) + 1
    for cell, fixes in fix_repeats.items():
        applied = sorted(f for f, n in fixes.items() if n == n_repeats.get(cell))
        out.setdefault(cell, CellBinding(cell, "")).fixes = applied
    return out


def _parse(repeat: int | None, seed: int | None, obs: Mapping[str, Any]) -> RepeatBinding | None:
    """The probe's table as recorded, or None when it is not the shape the probe writes (a hand-edited or
    foreign record must not pass for evidence, nor crash the judge)."""
    try:
        groups = [
            {"id": int(g["id"]), "type": str(g.get("type", "")), "layers": [str(x) for x in g["layers"]]}
            for g in obs.get("groups") or []
        ]
        layers = {
            str(name): {
                "own_group": int(v["own_group"]),
                "type": str(v.get("type", "")),
                "steps": [{str(g): int(n) for g, n in step.items()} for step in v.get("steps") or []],
                "layer_type": str(v["layer_type"]) if v.get("layer_type") else None,
                "tables": [{str(g): int(n) for g, n in step.items()} for step in v.get("tables") or []],
                "kv": {str(t): int(n) for t, n in (v.get("kv") or {}).items()},
            }
            for name, v in (obs.get("layers") or {}).items()
        }
        targets = {
            str(name): {"type": str(t.get("type", "")), "owns_kv": bool(t.get("owns_kv"))}
            for name, t in (obs.get("targets") or {}).items()
        }
        proposes = int(obs.get("proposes") or 0)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    counts = [n for v in layers.values() for step in v["steps"] + v["tables"] for n in step.values()]
    if any(n < 0 for n in counts + [n for v in layers.values() for n in v["kv"].values()]):
        return None
    return RepeatBinding(repeat, seed, proposes, groups, layers, targets)


def _wrong(b: CellBinding) -> list[LayerBinding]:
    """One entry per repeat, misbound layer and group it read instead (most-read first)."""
    return _misread(b, via="metadata")


def _wrong_tables(b: CellBinding) -> list[LayerBinding]:
    """One entry per repeat, layer and group whose block table it read instead of its own group's."""
    return _misread(b, via="block-table")


def _misread(b: CellBinding, via: str) -> list[LayerBinding]:
    """The reads of `via` ("metadata": the metadata object a layer was handed; "block-table": the table inside
    it) that were another group's than the layer's own, one entry per repeat, layer and group, most-read first."""
    wrong: list[LayerBinding] = []
    types = {str(g): t for g, t in b.groups}
    tables = via == "block-table"
    for r in b.repeats:
        for name in b.layers:
            own, kind = b.own(name)
            reads = r.table_reads(name) if tables else r.reads(name)
            ran = sum(reads.values())
            # Another group's table inside that group's own metadata object is the metadata misread (said
            # once, as via="metadata"); the block-table finding is a table that is not its object's group's.
            handed = r.reads(name) if tables else {}
            for g, n in sorted(reads.items(), key=lambda kv: -kv[1]):
                if g != str(own) and g not in handed:
                    wrong.append(
                        LayerBinding(
                            layer=name,
                            type=kind,
                            own_group=own if own is not None else -1,
                            read_group=g,
                            read_type=types.get(g) or None,
                            steps=n,
                            of_steps=ran,
                            hash_seeds=[r.hash_seed],
                            via=via,
                        )
                    )
    return wrong


def _kv_read(r: RepeatBinding, name: str) -> KvRead | None:
    """Which target layer's KV `name` read most in repeat `r`, beside the one it should read."""
    reads = r.kv_reads(name)
    if not reads:
        return None
    read, steps = max(reads.items(), key=lambda kv: (kv[1], kv[0]))
    return KvRead(
        layer=name,
        type=r.own_type(name),
        read=read,
        read_type=(r.targets.get(read) or {}).get("type"),
        expected=r.expected_kv(name),
        steps=steps,
        of_steps=sum(reads.values()),
        hash_seeds=[r.hash_seed],
    )


def _wrong_kv(b: CellBinding) -> list[KvRead]:
    """One entry per repeat and draft layer that read any target layer's KV but the expected one."""
    wrong: list[KvRead] = []
    for r in b.repeats:
        if not r.targets:
            continue  # a record of the probe before issue 34: nothing to hold the KV against
        for name in b.layers:
            expected = r.expected_kv(name)
            for read, n in sorted(r.kv_reads(name).items(), key=lambda kv: -kv[1]):
                if read != expected:
                    wrong.append(
                        KvRead(
                            layer=name,
                            type=r.own_type(name),
                            read=read,
                            read_type=(r.targets.get(read) or {}).get("type"),
                            expected=expected,
                            steps=n,
                            of_steps=sum(r.kv_reads(name).values()),
                            hash_seeds=[r.hash_seed],
                        )
                    )
    return wrong


def binding_findings(bindings: Mapping[str, CellBinding]) -> list[Finding]:
    out: list[Finding] = []
    for cell, b in bindings.items():
        seeds = [r.hash_seed for r in b.repeats]
        if b.repeats:
            wrong = _wrong(b) + _wrong_tables(b)
            kv_wrong = _wrong_kv(b)
            if wrong or kv_wrong:
                bad = {w.layer for w in wrong} | {w.layer for w in kv_wrong}
                first = b.repeats[0]
                kv_reads = [k for k in (_kv_read(first, n) for n in b.layers) if k is not None]
                payload = MetadataBinding(
                    wrong=wrong,
                    layers=b.layers,
                    correct=[n for n in b.layers if n not in bad],
                    repeats=len(b.repeats),
                    hash_seeds=seeds,
                    kv_wrong=kv_wrong,
                    kv_reads=kv_reads,
                )
                # The cause of the first kind of misreading, in the order a reader should fix them: a layer
                # handed another group's metadata, then its own metadata with another table, then the KV.
                vias = {w.via for w in wrong}
                cause = (
                    Cause.WRONG_GROUP_METADATA
                    if "metadata" in vias
                    else Cause.WRONG_BLOCK_TABLE
                    if vias
                    else Cause.WRONG_KV_SHARING
                )
                out.append(Finding(Kind.METADATA_BINDING, Severity.FAIL, cell, cause, payload))
        if b.missing:
            why = b.missing[0][2]
            out.append(
                Finding(
                    Kind.BINDING_UNOBSERVED,
                    Severity.WARN,
                    cell,
                    Cause.PROBE_SAW_NOTHING,
                    BindingUnobserved(repeats=len(b.missing), hash_seeds=[m[1] for m in b.missing], why=why),
                )
            )
        for fix in b.fixes:
            probed = bool(b.repeats) or bool(b.missing)
            status = (
                "verified"
                if b.verified
                else (
                    "graph-mode"
                    if b.graph_effective and probed and not (_wrong(b) or _wrong_tables(b) or _wrong_kv(b))
                    else "not-verified"
                    if probed
                    else "no-probe"
                )
            )
            steps = sum(sum(r.reads(n).values()) for r in b.repeats for n in r.layers)
            severity = Severity.WARN if status in ("not-verified", "graph-mode") else Severity.INFO
            out.append(
                Finding(
                    Kind.FIX_VERIFICATION,
                    severity,
                    cell,
                    Cause.NONE,
                    FixVerification(
                        patch=fix, status=status, layers=len(b.layers), steps=steps, repeats=len(b.repeats)
                    ),
                )
            )
    return out
