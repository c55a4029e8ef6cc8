"""The per-signal judges: each turns one signal of a run's evidence (judge/evidence.py) into typed findings
(judge/findings/). judge/diagnoses.py composes them (and judge/compare.py the upstream golden's check);
judge/plan.py counts the checks they make in the run's false-alarm family. Nothing here prints.

- binding_readout.py: The metadata-binding probe's read-out (mtpbench/patches/probes/metadata_binding.py)
- builds.py: Builds side by side (issue 28): every build of a run held against its reference build
  (`reference_build`, default the first build the run lists) at the same mode and variant, as every mode is held
  against the reference mode at the same build
- concurrency.py: A serving run's concurrency sweep (`workload.concurrency: [1, 4, 16]`, engine/serving.py) as the
  judge sees it
- context.py: A context sweep's judgement (issue 31, workload.context)
- drift.py: Drift within one process: what a soak cell's rounds say (pure; reads the evidence stage's CellResult)
- exactness.py: Exactness is evidence (issue 34): where the run showed its platform exact, a prompt that stops
  counting what the weights say (or what the reference build counts) is a finding of its own, `exactness-lost` (exit
  1), however small the pooled change
- features.py: Engine features (prefix caching, chunked prefill, batch size, async scheduling, context length) as
  the judge sees them
- reference_comparison.py: The engine's counts held against the reference the weights give (mtpbench/reference/,
  stored in runs/<id>/reference.jsonl)
- replay_readout.py: The graph-replay probe's read-out (mtpbench/patches/probes/graph_replay.py)
- serving_summary.py: The serving workload's own figures and checks (pure); mtpbench/render/serving.py renders them
- upstream.py: A cell against a baseline's upstream golden, judged as the upstream test judges, beside mtpbench's
  verdict
"""
