"""vLLM's spec-decode counters as mtpbench's counts, whichever way vLLM hands them over: the engine's
metrics (`LLM.get_metrics()` in the offline worker), a server's /metrics text (prometheus_client's parser,
which vLLM brings), and a request's acceptance histogram (per-request metrics, offline and served alike).
One place for the metric names and the histogram rule; counters are differenced around a prompt or a load
and summed over requests. Standard library at module level (the build's interpreter)."""

from __future__ import annotations

from typing import Any

# Prometheus counter families (sample names carry a `_total` suffix).
FAMILIES = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
PER_POS_FAMILY = "vllm:spec_decode_num_accepted_tokens_per_pos"


# --- counts -----------------------------------------------------------------------------------------------


def spec_counters_from_metrics(text: str, k: int) -> dict[str, Any]:
    """Spec-decode counters from a `/metrics` page, summed over label sets (engines), parsed with
    prometheus_client's own text parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {v: 0 for v in FAMILIES.values()}
    per_pos = [0] * k
    for fam in text_string_to_metric_families(text):
        if fam.name in FAMILIES:
            out[FAMILIES[fam.name]] += sum(int(s.value) for s in fam.samples if s.name.endswith("_total"))
        elif fam.name == PER_POS_FAMILY:
            for s in fam.samples:
                if s.name.endswith("_total"):
                    pos = int(s.labels.get("position", -1))
                    if 0 <= pos < k:
                        per_pos[pos] += int(s.value)
    out["accepted_per_pos"] = per_pos
    return out


def counts_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {
        **{key: after[key] - before[key] for key in FAMILIES.values()},
        "accepted_per_pos": [a - b for a, b in zip(after["accepted_per_pos"], before["accepted_per_pos"], strict=True)],
    }


def counts_from_histogram(
    hist: list[Any], k: int, num_draft_tokens: int, num_drafts: int | None = None, num_accepted: int | None = None
) -> dict[str, Any]:
    """Counts from vLLM's acceptance histogram: hist[j] = verify steps that accepted exactly j drafts.
    Acceptance is a prefix, so position i was accepted in every step that accepted more than i."""
    h = [int(x) for x in hist]
    return {
        "num_drafts": sum(h) if num_drafts is None else int(num_drafts),
        "num_draft_tokens": int(num_draft_tokens),
        "num_accepted_tokens": sum(j * c for j, c in enumerate(h)) if num_accepted is None else int(num_accepted),
        "accepted_per_pos": [sum(h[i + 1 :]) for i in range(k)],
    }


def counts_from_spec_metrics(sd: dict[str, Any], k: int) -> dict[str, Any]:
    """Per-request counts from a served response's `metrics.speculative_decoding` (vLLM's summary level)."""
    return counts_from_histogram(
        sd.get("acceptance_histogram") or [],
        k,
        int(sd.get("num_draft_tokens", 0)),
        sd.get("num_spec_steps"),
        sd.get("num_accepted_draft_tokens"),
    )


def engine_counters(metrics: list[Any]) -> dict[str, Any]:
    """The spec-decode counters of `LLM.get_metrics()`, summed over label sets (one per engine), in the
    shape spec_counters_from_metrics gives for a server: the same names, the same per-position list."""
    out: dict[str, Any] = {key: 0 for key in FAMILIES.values()}
    per_pos: list[int] = []
    for m in metrics:
        name = getattr(m, "name", None)
        if name in FAMILIES:
            out[FAMILIES[name]] += int(m.value)
        elif name == PER_POS_FAMILY:
            vals = [int(v) for v in m.values]
            per_pos.extend([0] * (len(vals) - len(per_pos)))
            per_pos = [a + v for a, v in zip(per_pos, vals + [0] * (len(per_pos) - len(vals)), strict=True)]
    out["accepted_per_pos"] = per_pos
    return out


def sum_counts(items: list[dict[str, Any]], k: int) -> dict[str, Any]:
    out: dict[str, Any] = {key: 0 for key in FAMILIES.values()}
    per_pos = [0] * k
    for c in items:
        for key in FAMILIES.values():
            out[key] += int(c[key])
        for i, v in enumerate(c["accepted_per_pos"][:k]):
            per_pos[i] += int(v)
    out["accepted_per_pos"] = per_pos
    return out
