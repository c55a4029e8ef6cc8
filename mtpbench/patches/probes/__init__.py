"""Probes: variant entries that change no result and record, inside the engine's process, what the engine did
(judge/signals/ reads them back). One module per probe, named after its patch name (mtpbench/fixes/registry.py).
Standard library only at module level.

- graph_replay.py: Probe `graph-replay`: did the drafter really run captured graphs, counted inside the engine's
  process?
- metadata_binding.py: Probe `metadata-binding`: which KV-cache group's attention metadata each Gemma4 MTP draft
  layer consumed
- metadata_binding_tasks.py: The metadata-binding read-out of vllm-ascend's draft graph tasks (pure logic, standard
  library only)
"""
