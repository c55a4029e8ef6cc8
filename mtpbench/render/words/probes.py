"""The words of the probes' findings (issue 21): metadata-binding (a draft layer read another KV-cache group's
attention metadata), metadata-binding-unobserved, fix-verification, and the graph-replay probe's
graph-not-replayed / draft-graph-replay; also the words of the HTML report's binding grid (bindinggrid.py lays
it out). Sentences only, no arithmetic.
"""

from __future__ import annotations

from typing import Any

from mtpbench.judge.findings.probes import BindingUnobserved, FixVerification, GraphReplay, KvRead, MetadataBinding

__all__ = [
    "BINDING_CAPTION",
    "BINDING_HEADING",
    "attn_type_text",
    "binding_verdict",
    "layer_label",
    "msg_binding_unobserved",
    "msg_fix_verification",
    "msg_graph_replay",
    "msg_metadata_binding",
    "target_label",
]

BINDING_HEADING = "Which KV-cache group each draft layer read (metadata-binding probe)"


BINDING_CAPTION = (
    "Each square: the draft steps (all draft positions and repeats together) in which the draft layer consumed "
    "that KV-cache group's attention metadata, identified by the metadata object / block-table tensor the layer "
    "was handed, not by names. Outlined: the layer's own group. Red: it read another group's. The last columns: "
    "whose block table its metadata held (matched with the true per-group tables the runner gave the proposer) "
    "and which target layer's KV it read (red: not the last target layer of its type that owns its KV)."
)


def binding_verdict(verified: bool, seeds: str, graph: bool = False) -> str:
    what = "every draft layer read its own group" if verified else "NOT every draft layer read its own group"
    if graph and not verified:
        what = "graphs ran: the eager-side metadata only, not what the replayed draft graph was bound to"
    return f"{what} (PYTHONHASHSEED {seeds or 'none'})"


def layer_label(name: str) -> str:
    """ "draft layer 3" for vLLM's "draft_model.layers.3.self_attn.attn"; the name itself otherwise."""
    digits = name.split(".layers.")[1].split(".")[0] if ".layers." in name else ""
    return f"draft layer {digits}" if digits.isdigit() else name


def attn_type_text(kind: str | None) -> str:
    return (kind or "unknown type").replace("_", " ")


def _hash_seeds(seeds: list[int | None]) -> str:
    shown = sorted({"?" if s is None else str(s) for s in seeds}, key=lambda x: (len(x), x))
    return f"PYTHONHASHSEED {', '.join(shown)}"


def _layers_text(names: list[str]) -> str:
    """ "draft layers 1-2" / "draft layer 0" / "draft layers 0, 3" (names as vLLM's draft layers)."""
    labels = [layer_label(n) for n in names]
    nums = [lab.rsplit(" ", 1)[1] for lab in labels if lab.startswith("draft layer ")]
    if len(nums) != len(labels) or not nums:
        return ", ".join(labels)
    if len(nums) == 1:
        return f"draft layer {nums[0]}"
    ints = [int(x) for x in nums]
    run = ints == list(range(ints[0], ints[0] + len(ints)))
    return f"draft layers {ints[0]}-{ints[-1]}" if run else f"draft layers {', '.join(nums)}"


def target_label(name: str | None) -> str:
    """ "target layer 3" for vLLM's "model.language_model.layers.3.self_attn.attn"; the name itself otherwise."""
    if not name:
        return "no target layer"
    digits = name.split(".layers.")[1].split(".")[0] if ".layers." in name else ""
    return f"target layer {digits}" if digits.isdigit() else name


def _read_text(read: str, read_type: str | None, via: str) -> str:
    if via == "block-table":
        return "a block table of no group" if read == "unidentified" else f"group {read}'s block table"
    return (
        "metadata of no group of its step" if read == "unidentified" else f"group {read} ({attn_type_text(read_type)})"
    )


def _kv_text(k: KvRead) -> str:
    what = "the KV of no target layer" if k.read == "unidentified" else f"the KV of {target_label(k.read)}"
    read_type = f" ({attn_type_text(k.read_type)})" if k.read_type else ""
    should = (
        f", not {target_label(k.expected)} (the last {attn_type_text(k.type)} target layer that owns its KV)"
        if k.expected
        else f" (no {attn_type_text(k.type)} target layer owns a KV)"
    )
    return f"read {what}{read_type}{should} in {k.steps}/{k.of_steps} draft steps"


def _kv_summary(reads: list[KvRead]) -> str:
    """ "KV read: draft layers 0, 3 <- target layer 4 (full attention); draft layers 1-2 <- target layer 3 ..." """
    alike: dict[tuple[str, str | None], list[str]] = {}
    for k in reads:
        alike.setdefault((k.read, k.read_type), []).append(k.layer)
    said = [
        f"{_layers_text(names)} <- {target_label(read) if read != 'unidentified' else 'no target layer'}"
        + (f" ({attn_type_text(read_type)})" if read_type else "")
        for (read, read_type), names in alike.items()
    ]
    return f"KV read: {'; '.join(said)}"


def msg_metadata_binding(n: MetadataBinding) -> str:
    """Per PYTHONHASHSEED: the misbound layers (metadata object, block table, KV), merged where they read alike,
    then the correct ones and which target layer's KV each draft layer read."""
    parts: list[str] = []
    seeds = list(
        dict.fromkeys([s for w in n.wrong for s in w.hash_seeds] + [s for k in n.kv_wrong for s in k.hash_seeds])
    )
    for seed in seeds:
        alike: dict[tuple[Any, ...], list[str]] = {}
        for w in n.wrong:
            if seed in w.hash_seeds:
                key = (w.via, w.type, w.own_group, w.read_group, w.read_type, w.steps, w.of_steps)
                alike.setdefault(key, []).append(w.layer)
        said = []
        for (via, kind, own, read, read_type, steps, of), names in alike.items():
            said.append(
                f"{_layers_text(names)} ({attn_type_text(kind)}, group {own}) read "
                f"{_read_text(read, read_type, via)} in {steps}/{of} draft steps"
            )
        kv_alike: dict[tuple[Any, ...], list[str]] = {}
        for k in n.kv_wrong:
            if seed in k.hash_seeds:
                key = (k.type, k.read, k.read_type, k.expected, k.steps, k.of_steps)
                kv_alike.setdefault(key, []).append(k.layer)
        for names in kv_alike.values():
            first = next(k for k in n.kv_wrong if k.layer == names[0] and seed in k.hash_seeds)
            said.append(f"{_layers_text(names)} ({attn_type_text(first.type)}) {_kv_text(first)}")
        bad = {x for names in alike.values() for x in names} | {x for names in kv_alike.values() for x in names}
        ok = [x for x in n.layers if x not in bad]
        tail = f"; {_layers_text(ok)} correct" if ok else ""
        parts.append(f"{_hash_seeds([seed])}: {'; '.join(said)}{tail}")
    kv = f". {_kv_summary(n.kv_reads)}" if n.kv_reads else ""
    return f"{'. '.join(parts)}{kv} ({n.repeats} repeat(s) probed)"


def msg_binding_unobserved(n: BindingUnobserved) -> str:
    return (
        f"the metadata-binding probe recorded no draft step in {n.repeats} repeat(s) ({_hash_seeds(n.hash_seeds)}: "
        f"{n.why}): which group the draft layers read is not verified there"
    )


def msg_fix_verification(n: FixVerification) -> str:
    if n.status == "verified":
        return (
            f"{n.patch}: fix applied and verified: every draft layer ({n.layers}) read its own KV-cache group "
            f"in all {n.steps} layer-steps over {n.repeats} repeat(s) (metadata-binding probe)"
        )
    if n.status == "graph-mode":
        return (
            f"{n.patch}: fix applied, not verified in graph mode: the metadata-binding probe sees the metadata "
            "the eager path hands each draft layer, not the params a replayed draft graph's tasks were bound to"
        )
    if n.status == "no-probe":
        return (
            f"{n.patch}: fix applied, not verified: the variant has no metadata-binding probe (add "
            "metadata-binding to the variant to check that every draft layer reads its own KV-cache group)"
        )
    return (
        f"{n.patch}: fix applied but NOT verified: the metadata-binding probe saw draft layers read another "
        "group's metadata, or saw no draft step (see the metadata-binding findings)"
    )


def msg_graph_replay(n: GraphReplay) -> str:
    """The replay proof of one cell (graph-replay probe), and the failure when a graph mode ran the draft eagerly."""
    seeds = ", ".join("?" if s is None else str(s) for s in n.hash_seeds)
    runnable = n.runnable or "unknown"
    counts = (
        f"{n.replays} draft replays, {n.captures} captures, {n.eager_calls} eager calls of the graph wrapper "
        f"over {n.proposes} proposes; {n.captured} draft graphs held"
    )
    if n.status == "replayed":
        return f"draft graphs replayed: the drafter runs {runnable} ({counts}; PYTHONHASHSEED {seeds})"
    if n.status == "not-replayed":
        what = "is no graph wrapper" if not n.graph_wrapper else "never replayed a graph"
        return (
            f"graph mode {n.requested} requested and effective ({n.effective}), but the drafter's runnable "
            f"{runnable} {what} ({counts}; PYTHONHASHSEED {seeds}): the draft ran eagerly under a graph "
            "mode's name"
        )
    if n.status == "no-graph-effective":
        return (
            f"no graph on {n.device_type or 'this platform'}: {n.requested} requested, {n.effective} effective; "
            f"the drafter's runnable {runnable} is {'a' if n.graph_wrapper else 'no'} graph wrapper and replayed "
            f"{n.replays} graphs, so no replay is claimed"
        )
    if n.status == "eager-requested":
        return f"eager cell: no graph requested, the drafter runs {runnable} ({n.replays} replays)"
    return f"the graph-replay probe saw no draft step in some repeat (PYTHONHASHSEED {seeds}): replay not proven"
