"""Programs run in a build's interpreter to ask what it has, each as `python -m mtpbench.buildprobes.<name>`.

- doctor: platform, package versions, torch's devices, whether torchvision / transformers / vllm import
  (`mtpbench doctor`; read by mtpbench/run/doctor.py).
- devices: which platform the interpreter's vLLM targets and how many accelerators its torch sees (the
  device pool of `run --jobs`; read by mtpbench/run/devices.py).

Each prints one marked JSON line on stdout and exits 0 whatever it finds: what failed is in the answer.
The interpreter may lack mtpbench's dependencies, so these modules import the standard library only (and
nothing of mtpbench); the caller puts this mtpbench first on the probe's PYTHONPATH. The fix preflight's
probe imports the patch registry and lives beside it (mtpbench/fixes/probe.py).
"""
