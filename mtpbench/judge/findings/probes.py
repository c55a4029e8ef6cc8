"""The probes' finding payloads (judge/signals/binding_readout.py, judge/signals/replay_readout.py fill them): which
KV-cache group each draft layer read, whether a fix was verified, whether the draft replayed graphs. Beside
findings/__init__.py, whose Kind enum
names them."""

from __future__ import annotations

from dataclasses import dataclass, field

from mtpbench.judge.findings import Payload


@dataclass(frozen=True)
class LayerBinding:
    """One draft layer that read a group other than its own in some draft steps of one repeat."""

    layer: str
    type: str  # the layer's attention type ("sliding_attention" / "full_attention")
    own_group: int
    read_group: str  # the group id it read most often instead ("unidentified": no group of that step)
    read_type: str | None  # that group's attention type, when known
    steps: int  # draft steps (summed over draft positions) in which it read `read_group`
    of_steps: int  # draft steps it ran in that repeat
    hash_seeds: list[int | None]  # the repeat's PYTHONHASHSEED
    # What was wrong: "metadata" (the layer was handed another group's metadata object) or "block-table" (its
    # metadata held another group's block table: `read_group` is the group whose true table it was).
    via: str = "metadata"


@dataclass(frozen=True)
class KvRead:
    """Which target layer's KV one draft layer read in one repeat, and the one Gemma4 MTP defines for it."""

    layer: str
    type: str  # the draft layer's own attention type (its attention module's)
    read: str  # the target layer whose KV it read (most steps; "unidentified": no target layer's KV)
    read_type: str | None  # that target layer's attention type
    expected: str | None  # the last target layer of the draft layer's type that owns its KV (None: no such layer)
    steps: int  # draft steps in which it read `read`
    of_steps: int
    hash_seeds: list[int | None]


@dataclass(frozen=True, kw_only=True)
class MetadataBinding(Payload):
    """The metadata-binding probe's read-out of one cell: the misbound layers and the correct ones."""

    wrong: list[LayerBinding]
    layers: list[str]  # every draft layer the probe watched
    correct: list[str]  # draft layers bound to their own group in every step of every repeat
    repeats: int  # repeats the probe recorded
    hash_seeds: list[int | None]
    kv_wrong: list[KvRead] = field(default_factory=list)  # draft layers that read another target layer's KV
    # Which target layer's KV each draft layer read (first repeat's; empty where the probe did not see KV).
    kv_reads: list[KvRead] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class BindingUnobserved(Payload):
    repeats: int  # repeats that asked for the probe
    hash_seeds: list[int | None]
    why: str  # "no-record" (no observations stored) | "no-draft-step" | "error: ..."


@dataclass(frozen=True, kw_only=True)
class FixVerification(Payload):
    patch: str
    status: str  # "verified" | "not-verified" (misbound / saw nothing) | "graph-mode" (unverifiable) | "no-probe"
    layers: int  # draft layers the probe watched
    steps: int  # layer × draft steps it saw, over the repeats
    repeats: int


@dataclass(frozen=True, kw_only=True)
class GraphReplay(Payload):
    """The graph-replay probe's proof for one cell, over its probed repeats."""

    status: str  # "replayed" | "not-replayed" | "no-graph-effective" | "eager-requested" | "unobserved"
    requested: str | None  # requested cudagraph_mode ("eager" when enforce_eager)
    effective: str | None  # effective cudagraph_mode
    device_type: str | None
    runnable: str | None  # class of the drafter's runnable
    graph_wrapper: bool
    captured: int  # draft graphs held by the drafter's wrapper (the fewest over the repeats)
    replays: int  # draft calls that replayed a graph (the fewest over the repeats)
    captures: int
    eager_calls: int
    proposes: int
    hash_seeds: list[int | None]
