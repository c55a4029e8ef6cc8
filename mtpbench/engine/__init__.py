"""What runs inside a build's interpreter (worker, serving server/load/job): the standard library only at module
level, vllm imported lazily; of mtpbench only schema.py.

Other stages import each name from the module that owns it (records.py: the appends, the events and the one
prompt loop; serving.py: a serving cell-repeat and the `vllm bench serve` anchor; server.py, procs.py,
fingerprint.py, chat.py); the package itself imports nothing, so that importing one engine module (the worker,
in a build's interpreter) does not import the others. The worker itself is a command
(`python -m mtpbench.engine.worker JOB.json`), not a name here.
"""
