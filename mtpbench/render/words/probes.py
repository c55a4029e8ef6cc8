"""The words of the probes' findings (issue 21): metadata-binding (a draft layer read another KV-cache group's
attention metadata), metadata-binding-unobserved, fix-verification, and the graph-replay probe's
graph-not-replayed / draft-graph-replay; also the words of the HTML report's binding grid (bindinggrid.py lays
it out). Sentences only, no arithmetic.
"""

from __future__ import annotations

from typing import Any

from mtpbench.judge.findings_probes import BindingUnobserved, FixVerification, GraphReplay, MetadataBinding

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
]

BINDING_HEADING = "Which KV-cache group each draft layer read (metadata-binding probe)"


BINDING_CAPTION = (
    "Each square: the draft steps (all draft positions and repeats together) in which the draft layer consumed "
    "that KV-cache group's attention metadata, identified by the metadata object / block-table tensor the layer "
    "was handed, not by names. Outlined: the layer's own group. Red: it read another group's."
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


def msg_metadata_binding(n: MetadataBinding) -> str:
    """Per PYTHONHASHSEED: the misbound layers, merged where they read alike, then the correct ones."""
    parts: list[str] = []
    seeds = list(dict.fromkeys(s for w in n.wrong for s in w.hash_seeds))
    for seed in seeds:
        alike: dict[tuple[Any, ...], list[str]] = {}
        for w in n.wrong:
            if seed in w.hash_seeds:
                key = (w.type, w.own_group, w.read_group, w.read_type, w.steps, w.of_steps)
                alike.setdefault(key, []).append(w.layer)
        said = []
        for (kind, own, read, read_type, steps, of), names in alike.items():
            what = (
                "metadata of no group of its step"
                if read == "unidentified"
                else f"group {read} ({attn_type_text(read_type)})"
            )
            said.append(
                f"{_layers_text(names)} ({attn_type_text(kind)}, group {own}) read {what} in {steps}/{of} draft steps"
            )
        bad = {x for names in alike.values() for x in names}
        ok = [x for x in n.layers if x not in bad]
        tail = f"; {_layers_text(ok)} correct" if ok else ""
        parts.append(f"{_hash_seeds([seed])}: {'; '.join(said)}{tail}")
    return f"{'. '.join(parts)} ({n.repeats} repeat(s) probed)"


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
